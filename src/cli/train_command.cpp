// `pipetrain train`: real pipeline training. Here the flags become a job::TrainRequest,
// checked against each other, and job::train runs this process's part of the job (the
// launcher's without RANK in the environment, a rank's with it); what it says and
// returns is printed (train_console.h).
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "commands.h"
#include "model_options.h"
#include "options.h"
#include "recipe_options.h"
#include "train_console.h"
#include "pipetrain/graph/profile_cache.h"
#include "pipetrain/job/rank_spec.h"
#include "pipetrain/job/train_job.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/json_io.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

// Under --resume on as many ranks, the checkpoint's plan trains unless one of these (or
// a --batch other than the checkpoint's) asks the planner for another.
constexpr std::array<const char*, 5> kReplanning = {"--schedule", "--microbatches", "--microbatch-size",
                                                    "--recompute", "--rank-memory"};

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// "GPT2LMHeadModel" for 'transformers:GPT2LMHeadModel(GPT2Config())': what the run calls a --model-py model.
std::string modelPyName(const std::string& spec) {
  const std::string expr = spec.substr(spec.find(':') + 1);
  const std::size_t end = expr.find_first_of("(.[ ");
  const std::string name = expr.substr(0, end);
  return name.empty() ? "model" : name;
}

// The model and data the flags name, checked against each other: a --model-py model
// captured (once per host: the ranks of a torchrun job share the cached file; a
// launcher hands its ranks the file in their job), the model's name, the data's
// defaults.
void mapModelAndData(job::TrainRequest& a, const CLI::App& cmd) {
  const bool is_rank = std::getenv("RANK") != nullptr;
  a.config.model_config = parseModelOptions(a.model_options);
  a.config.data.seed = a.config.seed;
  if (!a.model_py.output.empty() && a.model_py.spec.empty()) throw Error("--model-output goes with --model-py");
  if (!a.model_py.spec.empty()) {
    if (!a.config.model_file.empty()) throw Error("--model-py is the model; drop --model-file");
    if (a.config.data.file.empty()) throw Error("--model-py needs --data-file: its first inputs trace the model");
    a.model_py.data_file = a.config.data.file;
    a.config.model_file = graph::capturedModel(a.model_py, graph::ProfileCache::defaultDir());
  }
  if (!a.config.model_file.empty()) {
    if (cmd.count("--model") || cmd.count("--model-option"))
      throw Error(std::string(a.model_py.spec.empty() ? "--model-file" : "--model-py") +
                  " is the model; drop --model and --model-option");
    a.config.model = a.model_py.spec.empty() ? std::filesystem::path(a.config.model_file).stem().string()
                                             : modelPyName(a.model_py.spec);
  }
  runtime::checkNumbers(a.config);  // before any long work
  if (!a.config.data.file.empty() && (cmd.count("--dataset") || cmd.count("--data-dir")))
    throw Error("--data-file is the data; drop --dataset and --data-dir");
  if (!a.data_dir.empty()) a.config.data.fashion_mnist_dir = a.config.data.fortunes_dir = a.data_dir;
  if (a.plan_args.schedule.name == "auto") a.plan_args.schedule.name.clear();
  // A zoo model trains on its own data unless told otherwise: fmnist-cnn on
  // Fashion-MNIST (it trained on random noise by default before); the others on
  // synthetic data, and the launcher says so.
  if (a.config.model_file.empty() && a.config.data.file.empty() && !cmd.count("--dataset")) {
    if (a.config.model == "fmnist-cnn") a.config.data.name = "fashion-mnist";
    if (!is_rank && a.config.data.name == "synthetic")
      say("note: no --dataset: " + a.config.model + " trains on synthetic data (random samples, nothing to learn)");
  }
}

// Flags that cannot go together, refused before any long work.
void checkPlanFlags(const job::TrainRequest& a, const CLI::App& cmd) {
  if (!a.plan_args.schedule.name.empty()) schedule::checkScheduleName(a.plan_args.schedule.name);
  const bool hand_made = !a.plan_args.stage_bounds.empty() || a.plan_args.data_parallel;
  if (cmd.count("--batch"))
    for (const char* flag : {"--microbatches", "--microbatch-size", "--plan", "--stage-bounds", "--data-parallel"})
      if (cmd.count(flag))
        throw Error(std::string("--batch leaves the micro-batching to the planner; drop ") + flag +
                    " (or drop --batch and give --microbatches and --microbatch-size)");
  if (hand_made)
    for (const char* flag : {"--objective", "--calibration-seconds", "--rank-memory"})
      if (cmd.count(flag))
        throw Error(std::string(flag) + " steers the planner, and --stage-bounds or --data-parallel leave it "
                    "nothing to choose; drop one of them");
  if (cmd.count("--min-nproc") && (!a.plan.empty() || !a.plan_args.stage_bounds.empty()))
    throw Error("--min-nproc re-plans for the ranks left, and --plan or --stage-bounds fix the plan for " +
                std::to_string(a.nproc) + " ranks; drop one of them (--data-parallel goes with it)");
  if (cmd.count("--min-nproc") && a.min_nproc >= a.nproc)
    throw Error("--min-nproc " + std::to_string(a.min_nproc) + " leaves no rank to lose from --nproc " +
                std::to_string(a.nproc) + "; give fewer");
  if (cmd.count("--min-nproc") && a.config.checkpoint_dir.empty())
    throw Error("--min-nproc goes on from the newest checkpoint: give --checkpoint-dir");
  // A plan file decides stages, micro-batching and schedule.
  if (!a.plan.empty())
    for (const char* flag : {"--schedule", "--chunks", "--microbatches", "--microbatch-size", "--stage-bounds",
                             "--data-parallel", "--vertical-sync", "--pipemare-t1", "--pipemare-warmup", "--pipemare-t2",
                             "--pipemare-decay", "--objective", "--calibration-seconds", "--recompute", "--rank-memory"})
      if (cmd.count(flag))
        throw Error("--plan " + a.plan + " decides the stages, micro-batching and schedule (with its options); drop " +
                    flag + " or edit the plan");
}

// The job, with what it says on the console: progress (rewritten in place by the
// launcher on a terminal), the planner's choice, and the run's summary where this
// process sums it up.
int runTrain(job::TrainRequest& a, const CLI::App& cmd) {
  const job::TrainAsked asked{cmd.count("--nproc") > 0, cmd.count("--batch") > 0,
                              std::any_of(kReplanning.begin(), kReplanning.end(),
                                          [&](const char* flag) { return cmd.count(flag) > 0; })};
  std::optional<ProgressDisplay> display;  // from the first progress, when the plan is known
  const auto shown = [&]() -> ProgressDisplay& {
    if (!display) display.emplace(a.config.plan.samplesPerMinibatch(), std::getenv("RANK") == nullptr);
    return *display;
  };
  job::TrainWatch watch;
  watch.say = say;
  watch.planned = printPlanned;
  watch.progress = [&](const job::ProgressReport& p) { shown().show(p); };
  watch.line = [&](const std::string& line) {
    if (display) display->endLine();
    std::cout << line << std::endl;
  };
  watch.restart = [&](const std::string& why) {
    if (display) display->endLine();
    std::cerr << "pipetrain: " << why << std::endl;
  };
  watch.rank_progress = [&](const runtime::Progress& p) {
    shown().show({p.epoch, p.step, p.steps, p.loss, p.samples_per_second});
  };
  const job::TrainOutcome outcome = job::train(a, asked, watch);
  display.reset();  // its line ends before the summary
  if (outcome.summary) printRunSummary(a, *outcome.summary);
  if (outcome.rank) printRankResult(*outcome.rank);
  return 0;
}

}  // namespace

Command addTrainCommand(CLI::App& app) {
  auto a = std::make_shared<job::TrainRequest>();
  auto job_file = std::make_shared<std::string>();
  auto& c = a->config;
  CLI::App* cmd = app.add_subcommand("train", torchCommandDescription("train"));
  // A later --option overrides an earlier one, so scripts can append to a base command.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--model", c.model, modelNameList())->capture_default_str();
  c.device = "auto";
  cmd->add_option("--device", c.device,
                  "cpu; cuda (local rank r takes GPU r mod the GPUs, so ranks may share one); cuda:N or cuda:N,M,... "
                  "(rank r the list's entry r mod its length); auto: cuda where LibTorch sees a GPU")
      ->capture_default_str();
  cmd->add_option("--wire", a->wire,
                  "what carries activations, gradients and gradient buckets between ranks: nccl (each rank on a "
                  "GPU of its own), shm (gradient sums in shared memory between CPU ranks of one host, messages "
                  "over gloo), gloo (through host copies on GPUs), auto: nccl where it can, else shm where it "
                  "can, else gloo; coordination always goes over gloo")
      ->check(CLI::IsMember({"auto", "gloo", "shm", "nccl"}))
      ->capture_default_str();
  cmd->add_option("--precision", c.precision, "fp32, or bf16 (autocast; fp32 master weights and optimizer state)")
      ->capture_default_str();
  cmd->add_option("--torch-trace", c.torch_trace,
                  "PREFIX: each rank r writes a Chrome trace (LibTorch's profiler: operators, GPU kernels and copies) "
                  "of mini-batches 21 and 22 to PREFIX.rank<r>.json (the run needs 22 or more)");
  cmd->add_option("--model-file", c.model_file,
                  "your own model: a TorchScript file saved from Python (docs/byo.md); needs --data-file");
  cmd->add_option("--data-file", c.data.file,
                  "your own data: a torch.save file of {\"inputs\", \"labels\"[, \"test_inputs\", \"test_labels\"]}, "
                  "or a token stream FILE.bin (flat uint16 tokens as nanoGPT writes them; --context, --token-dtype)");
  addTokenStreamOptions(cmd, c.data);
  cmd->add_option("--model-py", a->model_py.spec,
                  "your own model as Python: FILE.py:EXPRESSION or MODULE:EXPRESSION making the nn.Module, captured "
                  "by python/pipetrain_capture.py on --data-file's first inputs and cached (docs/byo.md)");
  cmd->add_option("--model-output", a->model_py.output,
                  "with --model-py: the tensor to train on where forward() returns several (a ModelOutput's logits)");
  cmd->add_option("--export", c.export_path, "with --model-file: write the trained model as TorchScript here");
  cmd->add_option("--model-option", a->model_options, "model size, KEY=INTEGER (e.g. layers=8 width=256)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--dataset", c.data.name,
                  "fashion-mnist, fortunes or synthetic (default: fashion-mnist for fmnist-cnn, else synthetic)");
  cmd->add_option("--data-dir", a->data_dir, "where the dataset's files are (default: the Debian package's folder)");
  cmd->add_option("--nproc", a->nproc, "local ranks to launch (ignored when RANK is set)")
      ->check(positive())->capture_default_str();
  auto& pa = a->plan_args;
  cmd->add_option("--schedule", pa.schedule.name,
                  schedule::scheduleNameList() +
                      ", or auto (default: the planner's choice; 1f1b with --stage-bounds or --data-parallel)");
  cmd->add_flag("--allow-async", a->allow_async, "without --plan: the planner may choose pipedream, 2bw or pipemare");
  addObjectiveOption(cmd, a->objective, "without --plan: ");
  cmd->add_option("--calibration-seconds", a->calibration.seconds_per_rule,
                  "time to accuracy: the training budget of each update rule's calibration")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--chunks", pa.schedule.chunks, "interleaved: stages per rank")->check(positive());
  cmd->add_flag("--vertical-sync", pa.schedule.vertical_sync,
                "pipedream: every stage uses the weight version the input stage used for a micro-batch");
  cmd->add_option("--pipemare-t1", pa.schedule.pipemare_lr_warmup,
                  "pipemare: learning-rate rescheduling, each stage from lr/delay up to lr (true/false)")
      ->capture_default_str();
  cmd->add_option("--pipemare-warmup", pa.schedule.pipemare_warmup_steps, "pipemare: T1's warm-up steps K")
      ->capture_default_str();
  cmd->add_option("--pipemare-t2", pa.schedule.pipemare_correction,
                  "pipemare: discrepancy correction of the backward pass's weights (true/false)")
      ->capture_default_str();
  cmd->add_option("--pipemare-decay", pa.schedule.pipemare_decay, "pipemare: T2's decay D (gamma = D^(1/delay))")
      ->capture_default_str();
  cmd->add_option("--microbatches", pa.microbatches, "micro-batches per mini-batch")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--microbatch-size", pa.microbatch_size, "samples per micro-batch")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--batch", pa.batch,
                  "samples per optimizer step, instead of --microbatches and --microbatch-size: the planner also "
                  "chooses how to split them (micro-batch sizes: powers of two dividing it, from the profiled one up)")
      ->check(positive());
  cmd->add_option("--epochs", c.epochs, "epochs")->check(positive())->capture_default_str();
  cmd->add_option("--max-steps", c.max_steps_per_epoch, "stop each epoch after this many mini-batches")
      ->check(positive());
  addRecipeOptions(cmd, c);
  cmd->add_option("--seed", c.seed, "model initialisation and data order")->capture_default_str();
  cmd->add_option("--plan", a->plan, "plan JSON: stages (by layer name), micro-batching and schedule");
  cmd->add_option("--cores", a->cores, "cores the local ranks share (default: all); each rank gets cores / nproc")
      ->check(positive());
  cmd->add_option("--plan-out", a->plan_out, "without --plan: where to write the plan the planner chooses");
  cmd->add_flag("--no-replication", a->no_replication, "without --plan: plan a pure pipeline, no replicated stages");
  cmd->add_flag("--reprofile", a->reprofile,
                "without --plan: profile the model again even where the profile cache holds its profile "
                "($PIPETRAIN_CACHE_DIR, else ~/.cache/pipetrain/profiles), and a job across hosts their network");
  addPartitionerOption(cmd, a->partitioner);
  addRecomputeOption(cmd, pa.recompute);
  cmd->add_option_function<std::string>(
      "--rank-memory", [a](const std::string& size) { a->rank_memory_bytes = text::parseBytes(size, "--rank-memory"); },
      "without --plan: the memory the planner gives each rank, e.g. 512MiB or 16GiB (default: physical memory / "
      "ranks): plan as a smaller device would hold it");
  cmd->add_option("--stage-bounds", pa.stage_bounds, "layer boundaries, e.g. 0,2,4 (default: the planner's choice)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--data-parallel", pa.data_parallel, "one stage replicated on every rank (plain data parallelism)");
  cmd->add_flag("--no-eval", [a](int64_t) { a->config.evaluate = false; }, "skip test accuracy at epoch ends");
  cmd->add_option("--timeout", a->timeout_seconds, "seconds before a silent peer ends the job")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", c.checkpoint_dir,
                  "save checkpoints here: at every epoch's end, and every --checkpoint-every mini-batches");
  cmd->add_option("--checkpoint-every", c.checkpoint_every,
                  "mini-batches between checkpoints within an epoch (an asynchronous schedule drains there)")
      ->check(positive());
  cmd->add_option("--keep-checkpoints", c.checkpoint_keep, "how many of the newest checkpoints stay")
      ->check(positive())
      ->capture_default_str();
  cmd->add_option("--resume", c.resume,
                  "continue from this checkpoint, or from the newest intact one in this folder; under its plan "
                  "unless a plan is given (any plan loads it)");
  cmd->add_option("--max-restarts", a->max_restarts,
                  "restart the job after a rank fails, up to this many times, from the newest checkpoint of "
                  "--checkpoint-dir (from the start without one)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--min-nproc", a->min_nproc,
                  "elastic: when a rank fails again after --max-restarts, go on with one rank fewer, down to this "
                  "many, re-planned for them and resumed from the newest checkpoint of --checkpoint-dir")
      ->check(positive());
  cmd->add_option("--trace", a->trace,
                  "write a typical mini-batch's measured Chrome trace (the median by duration of the last 9)");
  cmd->add_option("--svg", a->svg,
                  "write a typical mini-batch's measured Gantt chart (the median by duration of the last 9)");
  cmd->add_option("--summary-json", a->summary_json, "write the summary as JSON");
  cmd->add_option("--log-jsonl", a->log_jsonl, "write a JSON line per mini-batch and per evaluation (docs/report.md)");
  cmd->add_option("--report", a->report_dir, "write report.html (plan, predicted and measured Gantt, per-rank costs, "
                                             "loss and accuracy) into this folder");
  auto* job = cmd->add_option("--job", *job_file,
                              "FILE: a rank's whole job as JSON, as the launcher hands it to the ranks it starts "
                              "(every other option is in it)");
  return {cmd, [a, cmd, job, job_file] {
            if (*job) {
              for (const CLI::Option* o : cmd->get_options())
                if (o->count() > 0 && o != job) throw Error("--job holds the whole job; drop " + o->get_name());
              *a = job::rankJobFromJson(json_io::readFile(*job_file), *job_file);
              return runTrain(*a, *cmd);
            }
            mapModelAndData(*a, *cmd);
            // Where the plan is decided (the launcher, rank 0 of a job started by hand or
            // by torchrun), once.
            if (const char* rank = std::getenv("RANK"); !rank || std::string(rank) == "0") checkPlanFlags(*a, *cmd);
            return runTrain(*a, *cmd);
          }};
}

}  // namespace pipetrain::cli
