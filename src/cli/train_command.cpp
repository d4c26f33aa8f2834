// `pipetrain train`: real pipeline training. Without RANK in the environment it is the
// launcher (starting --nproc ranks of itself), here; with RANK set it is one rank, whether
// started by the launcher or by hand / another launcher (torchrun conventions), in
// train_rank.cpp.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "auto_plan.h"
#include "commands.h"
#include "launcher.h"
#include "model_options.h"
#include "options.h"
#include "prediction.h"
#include "report_pages.h"
#include "run_profile.h"
#include "train_plan.h"
#include "train_rank.h"
#include "pipetrain/graph/profile_cache.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/planner/update_rule.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/torch/checkpoint.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/trace/chrome_trace.h"
#include "pipetrain/trace/svg_gantt.h"
#include "pipetrain/trace/timeline_json.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/json_io.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

using json_io::Json;

// Under --resume on as many ranks, the checkpoint's plan trains unless one of these asks
// the planner for another.
constexpr std::array<const char*, 6> kReplanning = {"--schedule",        "--batch",     "--microbatches",
                                                    "--microbatch-size", "--recompute", "--rank-memory"};

// The ranks' steady-state action times (RankResult::action_seconds) per stage and type,
// `field` "seconds" (wall) or "cpu_seconds"; replicas of a stage are averaged.
std::map<std::pair<int, schedule::ActionType>, double> meanActionSeconds(const std::vector<Json>& results,
                                                                         const char* field) {
  std::map<std::pair<int, schedule::ActionType>, std::pair<double, int>> sums;
  for (const Json& r : results)
    for (const Json& a : r["action_seconds"]) {
      const std::string type = a["type"];
      for (int t = 0; t < schedule::kNumActionTypes; ++t)
        if (type == schedule::name(static_cast<schedule::ActionType>(t))) {
          auto& [total, count] = sums[{a["stage"].get<int>(), static_cast<schedule::ActionType>(t)}];
          total += a[field].get<double>();
          ++count;
        }
    }
  std::map<std::pair<int, schedule::ActionType>, double> means;
  for (const auto& [key, sum] : sums) means[key] = sum.first / sum.second;
  return means;
}

void showProgress(const std::string& line, int64_t samples_per_step, bool tty,
                  std::chrono::steady_clock::time_point& last_plain) {
  int epoch = 0;
  long long step = 0, steps = 0;
  double loss = 0, sps = 0;
  if (std::sscanf(line.c_str(), "PROGRESS %d %lld %lld %lf %lf", &epoch, &step, &steps, &loss, &sps) != 5) {
    std::cout << line << "\n";
    return;
  }
  const std::string text = progressLine(epoch, step, steps, loss, sps, samples_per_step);
  if (tty) std::cout << "\r" << text << "   " << std::flush;
  else if (plainLineDue(step, steps, last_plain)) std::cout << text << std::endl;
}

int localCores(const TrainArgs& a) {
  return a.cores > 0 ? a.cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int blasThreadsPerRank(const TrainArgs& a) { return std::max(1, localCores(a) / a.nproc); }

// Refuses a missing or unfitting dataset before any long work.
void checkData(const TrainArgs& a, const models::Model& model) { data::openDataset(a.config.data, model.input); }

// The launcher's own plan and profile when the user asked for neither (--plan-out keeps
// them): gone when the command ends, however it ends.
struct RemovedAtExit {
  std::vector<std::string> paths;
  RemovedAtExit() = default;
  RemovedAtExit(const RemovedAtExit&) = delete;
  RemovedAtExit& operator=(const RemovedAtExit&) = delete;
  ~RemovedAtExit() {
    for (const auto& p : paths) std::remove(p.c_str());
  }
};

// --report DIR keeps the summary and the metrics log beside the page (unless they are
// asked for elsewhere); the ranks learn where the log goes from their command line.
void prepareOutputs(TrainArgs& a) {
  if (!a.report_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.report_dir, ec);
    if (ec) throw Error("--report " + a.report_dir + ": cannot create the folder (" + ec.message() + ")");
    const std::filesystem::path dir(a.report_dir);
    if (a.summary_json.empty()) a.summary_json = (dir / "summary.json").string();
    if (a.log_jsonl.empty()) {
      a.log_jsonl = (dir / "metrics.jsonl").string();
      a.argv.insert(a.argv.end(), {"--log-jsonl", a.log_jsonl});
    }
  }
  // The reporting rank starts the file afresh; here it only has to be writable.
  if (!a.log_jsonl.empty()) checkWritable(a.log_jsonl, "--log-jsonl");
}

// The newest intact checkpoint in `dir` ("" when there is none, or no folder).
std::string newestCheckpoint(const std::string& dir) {
  if (dir.empty()) return "";
  try {
    return runtime::findCheckpoint(dir).dir;
  } catch (const Error&) {
    return "";
  }
}

std::string howToResume(const std::string& newest) {
  if (newest.empty()) return "no checkpoint was written (--checkpoint-dir makes a run resumable)";
  return "the newest intact checkpoint is " + newest + ": run the same command with --resume " + newest +
         " to go on from it";
}

int launch(TrainArgs& a, const models::Model& model) {
  runtime::checkConfig(a.config, model, a.nproc);  // the plan against the model and the job
  const int threads = blasThreadsPerRank(a);
  if (const int cores = localCores(a); a.nproc > cores) {
    std::printf("note: %d ranks on %d cores take turns on them, pinned round-robin as the simulator places "
                "them; on 2 cores, 3 ranks trained slower than 2 (docs/profiling.md#predicted-against-measured)\n",
                a.nproc, cores);
    std::fflush(stdout);
  }
  const bool tty = isatty(STDOUT_FILENO);
  auto last_plain = std::chrono::steady_clock::now();
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankOutput> outputs;
  std::vector<std::string> argv = a.argv;
  for (int attempt = 0;; ++attempt) {
    try {
      outputs = launchLocal(
          argv, a.nproc, threads,
          [&](int, const std::string& line) {
            showProgress(line, a.config.plan.samplesPerMinibatch(), tty, last_plain);
          },
          localCores(a) / threads);
      break;
    } catch (const Error& e) {
      const std::string newest = newestCheckpoint(a.config.checkpoint_dir);
      if (attempt >= a.max_restarts) throw Error(std::string(e.what()) + "\n" + howToResume(newest));
      std::cerr << (tty ? "\n" : "") << "pipetrain: " << e.what() << "\npipetrain: restart " << attempt + 1 << " of "
                << a.max_restarts << (newest.empty() ? ", from the start" : ", from checkpoint " + newest) << std::endl;
      argv = a.argv;
      if (!newest.empty()) argv.insert(argv.end(), {"--resume", newest});
    }
  }
  if (tty) std::cout << "\n";
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  Json ranks = Json::array();
  trace::Timeline timeline;
  const plan::Plan& plan = a.config.plan;
  const std::string& schedule_name = plan.schedule.name;
  timeline.title = a.config.model + ", " + schedule_name + ", " + std::to_string(a.nproc) + " ranks, " +
                   std::to_string(plan.microbatches) + " micro-batches (last mini-batch)";
  timeline.source = "measured";
  double train_seconds = 0, accuracy = -1, loss = 0, test_loss = -1;
  int64_t samples = 0;
  Json history = Json::array();
  std::vector<Json> results;
  for (const auto& o : outputs) {
    if (o.result_json.empty()) throw Error("rank " + std::to_string(o.rank) + " ended without reporting a result");
    const Json& r = results.emplace_back(Json::parse(o.result_json));
    const double train = r["train_seconds"], busy = r["busy_seconds"];
    train_seconds = std::max(train_seconds, train);
    samples = r["samples"];
    if (r["last_stage"]) {
      loss = r["final_loss"];
      accuracy = r["test_accuracy"];
      test_loss = r["test_loss"];
      if (history.empty()) history = r["history"];
    }
    const double wait = r["wait_seconds"], allreduce = r["allreduce_seconds"];
    // Time in a step that is neither compute, nor waiting for messages or the all-reduce:
    // the framework.
    const double overhead = train > 0 ? std::max(0.0, train - busy - wait - allreduce) / train : 0;
    // Lost to other processes on the same cores, inside compute or not, and the training
    // thread's time on a core (its work, whatever the sharing); -1 = unknown.
    const double core_wait = r["core_wait_seconds"], core_run = r["core_run_seconds"];
    ranks.push_back({{"rank", o.rank},
                     {"stages", r["stages"]},
                     {"bubble_fraction", train > 0 ? 1 - busy / train : 0},
                     {"wait_fraction", train > 0 ? wait / train : 0},
                     {"allreduce_fraction", train > 0 ? allreduce / train : 0},
                     {"overhead_fraction", overhead},
                     {"core_wait_fraction", core_wait < 0 ? -1.0 : train > 0 ? core_wait / train : 0},
                     {"core_run_fraction", core_run < 0 ? -1.0 : train > 0 ? core_run / train : 0},
                     {"peak_memory_bytes", r["peak_memory_bytes"]},
                     {"start_memory_bytes", r["start_memory_bytes"]},
                     {"data_memory_bytes", r["data_memory_bytes"]},
                     {"device", r["device"]},
                     {"data_channel", r["data_channel"]},
                     {"peak_device_memory_bytes", r["peak_device_memory_bytes"]},
                     {"weight_versions", r["weight_versions"]},
                     {"weight_bytes", r["weight_bytes"]},
                     {"action_seconds", r["action_seconds"]}});
    timeline.ranks.push_back(trace::actionsFromJson(r["last_step"], "rank " + std::to_string(o.rank)));
  }
  // Ranks timed from one shared origin (runtime::sharedOrigin), so one shift aligns them all.
  double first = std::numeric_limits<double>::infinity();
  for (const auto& rank : timeline.ranks)
    if (!rank.empty()) first = std::min(first, rank.front().start);
  for (auto& rank : timeline.ranks)
    for (auto& a : rank) a.start -= first, a.end -= first;
  // What the simulator predicts for these measured stage times, next to what happened.
  const Json& any_result = results.front();
  MeasuredRun measured{&plan,
                       meanActionSeconds(results, "seconds"),
                       meanActionSeconds(results, "cpu_seconds"),
                       localCores(a) / threads,
                       threads,
                       any_result["stage_output_bytes"].get<std::vector<int64_t>>(),
                       any_result["stage_param_bytes"].get<std::vector<int64_t>>(),
                       any_result["stage_preds"].get<std::vector<std::vector<int>>>()};
  // The run's stage times into the cached profile it was planned from (run_profile.h),
  // where every rank had its own cores: taking turns on them stretches the times. Its
  // memory beyond the planned tensors too, wherever the ranks computed on the host.
  if (!a.planner.is_null() && a.planner.contains("profile"))
    sharpenCachedProfile(a.planner["profile"], plan,
                         a.nproc <= localCores(a) / threads ? measured.action_seconds : plan::StageSeconds{},
                         runMemory(results, a.planner));
  sim::Evaluation prediction = predictRun(measured);
  const sim::Report& predicted = prediction.report;
  prediction.timeline.title = "predicted: " + timeline.title;
  // Memory as the planner predicted it from the profile (its layers' activations): the
  // run's own stage times say nothing of it.
  const bool planned_memory = !a.planner.is_null() && a.planner.contains("chosen") &&
                              a.planner["chosen"].contains("rank_peak_memory_bytes") &&
                              a.planner["chosen"]["rank_peak_memory_bytes"].size() == ranks.size();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ranks[r]["predicted_bubble_fraction"] = predicted.ranks[r].bubble_fraction;
    ranks[r]["predicted_weight_versions"] = predicted.ranks[r].weight_versions;
    if (planned_memory) {
      ranks[r]["predicted_peak_memory_bytes"] = a.planner["chosen"]["rank_peak_memory_bytes"][r];
      const Json& process = a.planner["chosen"].value("rank_process_bytes", Json::array());
      ranks[r]["predicted_process_bytes"] = r < process.size() ? process[r] : Json(0);
    }
  }
  // Whether the plan trains otherwise than synchronous SGD: its update rule's verdict, not
  // its schedule's (PipeDream on one stage replicated over the whole mini-batch is
  // synchronous SGD).
  const planner::UpdateRule rule = planner::updateRuleOf(a.config.plan, model.layerGraph());
  const bool asynchronous = !rule.synchronous;

  Json summary = {{"format", "pipetrain.train-summary"}, {"version", 1},
                  {"model", a.config.model}, {"schedule", schedule_name}, {"asynchronous", asynchronous},
                  {"world_size", a.nproc}, {"final_loss", loss},
                  {"throughput", train_seconds > 0 ? samples / train_seconds : 0},
                  {"wall_seconds", wall}, {"samples", samples}, {"ranks", ranks}, {"history", history},
                  {"predicted_throughput", predicted.throughput}, {"plan_file", a.plan}, {"plan", plan.toJson()},
                  {"measured_timeline", trace::timelineToJson(timeline)},
                  {"predicted_timeline", trace::timelineToJson(prediction.timeline)}};
  if (!a.planner.is_null()) summary["planner"] = a.planner;
  if (accuracy >= 0) summary["test_accuracy"] = accuracy;
  if (test_loss >= 0) summary["test_loss"] = test_loss;

  std::printf("trained %s with %s on %d ranks: %lld samples, %.1f samples/s, wall %.1f s\n", a.config.model.c_str(),
              schedule_name.c_str(), a.nproc, static_cast<long long>(samples),
              summary["throughput"].get<double>(), wall);
  if (!a.config.export_path.empty()) std::printf("exported the trained model to %s\n", a.config.export_path.c_str());
  if (asynchronous)
    std::printf("note: this plan trains asynchronously (%s), not as synchronous SGD, and converges differently\n",
                rule.description.c_str());
  else if (schedule::isAsynchronous(schedule_name))
    std::printf("note: %s here trains as synchronous SGD (%s)\n", schedule_name.c_str(), rule.description.c_str());
  if (plan.microbatch_size < plan.samplesPerMinibatch())
    if (const std::vector<std::string> normed = models::batchNormLayers(model); !normed.empty())
      std::printf("note: %zu layer(s) use batch norm ('%s'%s), whose statistics here are per micro-batch of %lld "
                  "samples, not over the mini-batch of %lld as in one process: training differs from it\n",
                  normed.size(), normed.front().c_str(), normed.size() > 1 ? ", ..." : "",
                  static_cast<long long>(plan.microbatch_size), static_cast<long long>(plan.samplesPerMinibatch()));
  std::printf("simulator, from the measured stage times: %.1f samples/s\n", predicted.throughput);
  if (!a.planner.is_null())
    if (const std::string before = beforeTrainingText(json_io::JsonCursor(a.planner, "planner")); !before.empty())
      std::printf("before training: %s\n", before.c_str());
  if (accuracy >= 0) std::printf("test accuracy %.4f, test loss %.4f, final training loss %.4f\n", accuracy, test_loss, loss);
  for (const auto& r : ranks) std::printf("%s\n", rankSummaryLine(r).c_str());
  for (const std::string& note : memoryNotesOfRun(summary, "this run")) std::printf("memory: %s\n", note.c_str());
  if (!a.trace.empty()) {
    trace::writeChromeTrace(timeline, a.trace);
    std::printf("trace: %s\n", a.trace.c_str());
  }
  if (!a.svg.empty()) {
    trace::writeSvgGantt(timeline, a.svg);
    std::printf("gantt: %s\n", a.svg.c_str());
  }
  if (!a.summary_json.empty()) json_io::writeFile(a.summary_json, summary);
  if (!a.report_dir.empty()) {
    const std::string page = (std::filesystem::path(a.report_dir) / "report.html").string();
    report::writeHtml(pageForRun(summary, readJsonLines(a.log_jsonl), a.summary_json), page);
    std::printf("report: %s\n", page.c_str());
  }
  return 0;
}

// "GPT2LMHeadModel" for 'transformers:GPT2LMHeadModel(GPT2Config())': what the run calls a --model-py model.
std::string modelPyName(const std::string& spec) {
  const std::string expr = spec.substr(spec.find(':') + 1);
  const std::size_t end = expr.find_first_of("(.[ ");
  const std::string name = expr.substr(0, end);
  return name.empty() ? "model" : name;
}

}  // namespace

Command addTrainCommand(CLI::App& app, const std::vector<std::string>& argv) {
  auto a = std::make_shared<TrainArgs>();
  a->argv = argv;
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
                  "GPU of its own), gloo (through host copies on GPUs), auto: nccl where it can, else gloo; "
                  "coordination always goes over gloo")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  cmd->add_option("--precision", c.precision, "fp32, or bf16 (autocast; fp32 master weights and optimizer state)")
      ->capture_default_str();
  cmd->add_option("--model-file", c.model_file,
                  "your own model: a TorchScript file saved from Python (docs/byo.md); needs --data-file");
  cmd->add_option("--data-file", c.data.file,
                  "your own data: a torch.save file of {\"inputs\", \"labels\"[, \"test_inputs\", \"test_labels\"]}");
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
  cmd->add_option_function<std::string>(
         "--objective", [a](const std::string& name) { a->objective = planner::objectiveFromName(name); },
         "without --plan: what the planner ranks by, throughput or time-to-accuracy (predicted seconds to a loss, "
         "from a calibration of each candidate's update rule, cached beside the profile; docs/time_to_accuracy.md)")
      ->check(CLI::IsMember({"throughput", "time-to-accuracy"}))
      ->default_str("throughput");
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
  cmd->add_option("--optimizer", c.optimizer, "adam or sgd (momentum 0.9)")->capture_default_str();
  cmd->add_option("--lr", c.lr, "learning rate")->capture_default_str();
  cmd->add_option("--lr-warmup", c.lr_warmup_steps,
                  "linear learning-rate warm-up over this many optimizer steps of each stage (PipeDream steps per "
                  "micro-batch)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", c.seed, "model initialisation and data order")->capture_default_str();
  cmd->add_option("--plan", a->plan, "plan JSON: stages (by layer name), micro-batching and schedule");
  cmd->add_option("--cores", a->cores, "cores the local ranks share (default: all); each rank gets cores / nproc")
      ->check(positive());
  cmd->add_option("--plan-out", a->plan_out, "without --plan: where to write the plan the planner chooses");
  cmd->add_flag("--no-replication", a->no_replication, "without --plan: plan a pure pipeline, no replicated stages");
  cmd->add_flag("--reprofile", a->reprofile,
                "without --plan: profile the model again even where the profile cache holds its profile "
                "($PIPETRAIN_CACHE_DIR, else ~/.cache/pipetrain/profiles)");
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
  cmd->add_option("--trace", a->trace, "write the last mini-batch's measured Chrome trace");
  cmd->add_option("--svg", a->svg, "write the last mini-batch's measured Gantt chart");
  cmd->add_option("--summary-json", a->summary_json, "write the summary as JSON");
  cmd->add_option("--log-jsonl", a->log_jsonl, "write a JSON line per mini-batch and per evaluation (docs/report.md)");
  cmd->add_option("--report", a->report_dir, "write report.html (plan, predicted and measured Gantt, per-rank costs, "
                                             "loss and accuracy) into this folder");
  return {cmd, [a, cmd] {
            a->config.model_config = parseModelOptions(a->model_options);
            a->config.data.seed = a->config.seed;
            if (!a->model_py.output.empty() && a->model_py.spec.empty())
              throw Error("--model-output goes with --model-py");
            // The launcher captures a --model-py model and hands its ranks the file.
            if (!a->model_py.spec.empty() && (std::getenv("RANK") == nullptr || a->config.model_file.empty())) {
              if (!a->config.model_file.empty()) throw Error("--model-py is the model; drop --model-file");
              if (a->config.data.file.empty()) throw Error("--model-py needs --data-file: its first inputs trace the model");
              a->model_py.data_file = a->config.data.file;
              a->config.model_file = graph::capturedModel(a->model_py, graph::ProfileCache::defaultDir());
              a->argv.insert(a->argv.end(), {"--model-file", a->config.model_file});
            }
            if (!a->config.model_file.empty()) {
              if (cmd->count("--model") || cmd->count("--model-option"))
                throw Error(std::string(a->model_py.spec.empty() ? "--model-file" : "--model-py") +
                            " is the model; drop --model and --model-option");
              a->config.model = a->model_py.spec.empty() ? std::filesystem::path(a->config.model_file).stem().string()
                                                         : modelPyName(a->model_py.spec);
            }
            runtime::checkNumbers(a->config);  // before any long work
            if (!a->config.data.file.empty() && (cmd->count("--dataset") || cmd->count("--data-dir")))
              throw Error("--data-file is the data; drop --dataset and --data-dir");
            if (!a->data_dir.empty()) a->config.data.fashion_mnist_dir = a->config.data.fortunes_dir = a->data_dir;
            if (a->plan_args.schedule.name == "auto") a->plan_args.schedule.name.clear();
            const bool is_rank = std::getenv("RANK") != nullptr;
            // A zoo model trains on its own data unless told otherwise: fmnist-cnn on
            // Fashion-MNIST (it trained on random noise by default before); the others on
            // synthetic data, and the launcher says so.
            if (a->config.model_file.empty() && a->config.data.file.empty() && !cmd->count("--dataset")) {
              if (a->config.model == "fmnist-cnn") a->config.data.name = "fashion-mnist";
              if (!is_rank && a->config.data.name == "synthetic")
                std::printf("note: no --dataset: %s trains on synthetic data (random samples, nothing to learn)\n",
                            a->config.model.c_str());
            }
            // --resume without a plan goes on under the checkpoint's, on as many ranks as
            // it ran (another --nproc plans afresh: any plan loads a checkpoint).
            std::optional<runtime::Checkpoint> resumed;
            if (!is_rank) resumed = resolveResume(a->config, true);
            if (resumed) {  // every rank resumes from this one
              a->argv.insert(a->argv.end(), {"--resume", resumed->dir});
              if (!cmd->count("--nproc")) a->nproc = resumed->manifest.world_size;
            }
            const char* world = std::getenv("WORLD_SIZE");
            const int world_size = is_rank && world ? std::atoi(world) : a->nproc;
            const bool hand_made = !a->plan_args.stage_bounds.empty() || a->plan_args.data_parallel;
            if (!is_rank && cmd->count("--batch")) {
              for (const char* flag : {"--microbatches", "--microbatch-size", "--plan", "--stage-bounds", "--data-parallel"})
                if (cmd->count(flag))
                  throw Error(std::string("--batch leaves the micro-batching to the planner; drop ") + flag +
                              " (or drop --batch and give --microbatches and --microbatch-size)");
            }
            if (!is_rank && hand_made)
              for (const char* flag : {"--objective", "--calibration-seconds", "--rank-memory"})
                if (cmd->count(flag))
                  throw Error(std::string(flag) + " steers the planner, and --stage-bounds or --data-parallel leave it "
                              "nothing to choose; drop one of them");
            // The launcher opens the model once, for every check and plan before the
            // ranks start (each rank opens its own).
            std::optional<models::Model> model;
            if (!is_rank) {
              model = runtime::openModel(a->config);  // an unknown model fails here, first
              checkData(*a, *model);
              prepareOutputs(*a);
            }
            // Every rank trains exactly the plan the launcher holds: it goes to them as a file.
            std::string out = a->plan_out;
            RemovedAtExit temporary;
            if (out.empty() && !is_rank) {
              out = (std::filesystem::temp_directory_path() /
                     ("pipetrain-plan-" + std::to_string(::getpid()) + ".json")).string();
              temporary.paths = {out, profilePath(out)};
            }
            if (!a->plan.empty()) {
              // A plan file decides stages, micro-batching and schedule; the launcher's own
              // choice reaches its ranks this way too, beside the options that led to it.
              const std::vector<std::string> decided = {
                  "--schedule", "--chunks", "--microbatches", "--microbatch-size", "--stage-bounds", "--data-parallel",
                  "--vertical-sync", "--pipemare-t1", "--pipemare-warmup", "--pipemare-t2", "--pipemare-decay",
                  "--objective", "--calibration-seconds", "--recompute", "--rank-memory"};
              for (const auto& flag : decided)
                if (!is_rank && cmd->count(flag))
                  throw Error("--plan " + a->plan + " decides the stages, micro-batching and schedule (with its " +
                              "options); drop " + flag + " or edit the plan");
              a->config.plan = plan::Plan::load(a->plan);
              if (!is_rank && !a->plan_out.empty()) json_io::writeFile(out, a->config.plan.toJson());
            } else if (hand_made) {
              a->config.plan = planFromArgs(model ? *model : runtime::openModel(a->config), a->plan_args, world_size);
              if (!is_rank) json_io::writeFile(out, a->config.plan.toJson());
            } else if (is_rank) {
              throw Error("ranks started by hand need a plan: --plan FILE (from `pipetrain plan` or "
                          "`pipetrain train --plan-out`), --stage-bounds or --data-parallel");
            } else if (resumed && a->nproc == resumed->manifest.world_size &&
                       std::none_of(kReplanning.begin(), kReplanning.end(),
                                    [&](const char* flag) { return cmd->count(flag) > 0; })) {
              a->config.plan = resumed->manifest.plan;
              json_io::writeFile(out, a->config.plan.toJson());
            } else {
              const ProfileRequest profile{a->nproc,         blasThreadsPerRank(*a), localCores(*a), a->model_options,
                                           a->plan_args,     a->timeout_seconds,     a->reprofile};
              const AutoPlanRequest request{profile,
                                            !a->no_replication,
                                            a->allow_async,
                                            a->partitioner,
                                            a->plan_args.recompute,
                                            a->rank_memory_bytes,
                                            out,
                                            a->objective,
                                            a->calibration};
              LocalPlan local = planLocalRun(a->config, *model, request);
              a->config.plan = std::move(local.plan);
              a->planner = std::move(local.planner);
            }
            if (resumed) {  // before the ranks start: they would each say the same
              const std::string difference = resumed->manifest.identity.differenceFrom(runtime::identityOf(a->config));
              if (!difference.empty())
                throw Error("--resume " + resumed->dir + " does not match this run: " + difference);
              // Refused here, before any rank starts: the ranks would each say it, and the
              // launcher would then advise resuming the very checkpoint.
              runtime::checkEpochsLeft(*resumed, a->config.epochs);
            }
            if (!is_rank) {
              if (a->plan.empty() || !a->plan_out.empty()) a->plan = out;
              a->argv.insert(a->argv.end(), {"--plan", a->plan});
            }
            return is_rank ? runRank(*a) : launch(*a, *model);
          }};
}

}  // namespace pipetrain::cli
