#include "pipetrain/job/train_checks.h"

#include <array>
#include <cstdlib>
#include <filesystem>

#include "pipetrain/graph/profile_cache.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

// Under --resume on as many ranks, the checkpoint's plan trains unless one of these (or
// a --batch other than the checkpoint's) asks the planner for another.
constexpr std::array<const char*, 5> kReplanning = {"schedule", "microbatches", "microbatch-size", "recompute",
                                                    "rank-memory"};

// "GPT2LMHeadModel" for 'transformers:GPT2LMHeadModel(GPT2Config())': what the run calls
// a Python model.
std::string modelPyName(const std::string& spec) {
  const std::string expr = spec.substr(spec.find(':') + 1);
  const std::string name = expr.substr(0, expr.find_first_of("(.[ "));
  return name.empty() ? "model" : name;
}

// The model and data the options name, checked against each other: a Python model
// captured (once per host: the ranks of a torchrun job share the cached file; a launcher
// hands its ranks the file in their job), the model's name, the data's defaults.
void resolveModelAndData(TrainRequest& a, const std::set<std::string>& given, const Say& say) {
  a.config.model_config = parseModelOptions(a.source.model_options);
  a.config.data.seed = a.config.seed;
  if (!a.source.model_py.output.empty() && a.source.model_py.spec.empty())
    throw Error("--model-output goes with --model-py");
  if (!a.source.model_py.spec.empty()) {
    if (!a.config.model_file.empty()) throw Error("--model-py is the model; drop --model-file");
    if (a.config.data.file.empty()) throw Error("--model-py needs --data-file: its first inputs trace the model");
    a.source.model_py.data_file = a.config.data.file;
    a.config.model_file = graph::capturedModel(a.source.model_py, graph::ProfileCache::defaultDir());
  }
  if (!a.config.model_file.empty()) {
    if (given.count("model") || given.count("model-option"))
      throw Error(std::string(a.source.model_py.spec.empty() ? "--model-file" : "--model-py") +
                  " is the model; drop --model and --model-option");
    a.config.model = a.source.model_py.spec.empty() ? std::filesystem::path(a.config.model_file).stem().string()
                                                    : modelPyName(a.source.model_py.spec);
  }
  runtime::checkNumbers(a.config);  // before any long work
  if (!a.config.data.file.empty() && (given.count("dataset") || given.count("data-dir")))
    throw Error("--data-file is the data; drop --dataset and --data-dir");
  if (!a.source.data_dir.empty()) a.config.data.fashion_mnist_dir = a.config.data.fortunes_dir = a.source.data_dir;
  if (a.planning.args.schedule.name == "auto") a.planning.args.schedule.name.clear();
  // A zoo model trains on its own data unless told otherwise: fmnist-cnn on
  // Fashion-MNIST (it trained on random noise by default before); the others on
  // synthetic data, and the launcher says so.
  if (a.config.model_file.empty() && a.config.data.file.empty() && !given.count("dataset")) {
    if (a.config.model == "fmnist-cnn") a.config.data.name = "fashion-mnist";
    if (std::getenv("RANK") == nullptr && a.config.data.name == "synthetic")
      say("note: no --dataset: " + a.config.model + " trains on synthetic data (random samples, nothing to learn)");
  }
}

// Options that cannot go together in deciding the plan.
void checkPlanOptions(const TrainRequest& a, const std::set<std::string>& given) {
  if (!a.planning.args.schedule.name.empty()) schedule::checkScheduleName(a.planning.args.schedule.name);
  const bool hand_made = !a.planning.args.stage_bounds.empty() || a.planning.args.data_parallel;
  if (given.count("batch"))
    for (const char* other : {"microbatches", "microbatch-size", "plan", "stage-bounds", "data-parallel"})
      if (given.count(other))
        throw Error(std::string("--batch leaves the micro-batching to the planner; drop --") + other +
                    " (or drop --batch and give --microbatches and --microbatch-size)");
  if (hand_made)
    for (const char* steering : {"objective", "calibration-seconds", "rank-memory"})
      if (given.count(steering))
        throw Error(std::string("--") + steering +
                    " steers the planner, and --stage-bounds or --data-parallel leave it nothing to choose; drop "
                    "one of them");
  if (given.count("min-nproc")) {
    if (!a.planning.plan_file.empty() || !a.planning.args.stage_bounds.empty())
      throw Error("--min-nproc re-plans for the ranks left, and --plan or --stage-bounds fix the plan for " +
                  std::to_string(a.ranks.nproc) + " ranks; drop one of them (--data-parallel goes with it)");
    if (a.ranks.min_nproc >= a.ranks.nproc)
      throw Error("--min-nproc " + std::to_string(a.ranks.min_nproc) + " leaves no rank to lose from --nproc " +
                  std::to_string(a.ranks.nproc) + "; give fewer");
    if (a.config.checkpoint_dir.empty()) throw Error("--min-nproc goes on from the newest checkpoint: give --checkpoint-dir");
  }
  // A plan file decides stages, micro-batching and schedule.
  if (!a.planning.plan_file.empty())
    for (const char* other : {"schedule", "chunks", "microbatches", "microbatch-size", "stage-bounds", "data-parallel",
                              "vertical-sync", "pipemare-t1", "pipemare-warmup", "pipemare-t2", "pipemare-decay",
                              "objective", "calibration-seconds", "recompute", "rank-memory"})
      if (given.count(other))
        throw Error("--plan " + a.planning.plan_file +
                    " decides the stages, micro-batching and schedule (with its options); drop --" + other +
                    " or edit the plan");
}

}  // namespace

void resolveTrainRequest(TrainRequest& request, const std::set<std::string>& given, const Say& say) {
  resolveModelAndData(request, given, say);
  // Where the plan is decided (the launcher, rank 0 of a job started by hand or by
  // torchrun), once.
  if (const char* rank = std::getenv("RANK"); !rank || std::string(rank) == "0") checkPlanOptions(request, given);
}

TrainAsked askedOf(const std::set<std::string>& given) {
  TrainAsked asked;
  asked.nproc = given.count("nproc") > 0;
  asked.batch = given.count("batch") > 0;
  for (const char* option : kReplanning) asked.replanning = asked.replanning || given.count(option) > 0;
  return asked;
}

models::ModelConfig parseModelOptions(const std::vector<std::string>& options) {
  models::ModelConfig out;
  for (const auto& o : options) {
    const auto eq = o.find('=');
    char* end = nullptr;
    const long long v = eq == std::string::npos ? 0 : std::strtoll(o.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || !end || *end != '\0' || eq + 1 == o.size())
      throw Error("--model-option \"" + o + "\": expected KEY=INTEGER, e.g. layers=8");
    out[o.substr(0, eq)] = v;
  }
  return out;
}

}  // namespace pipetrain::job
