// `pipetrain profile`: measure a model's per-layer costs at a batch size and write them
// as a LayerGraph for `simulate --graph` and the planners (docs/profiling.md).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "pipetrain/job/launcher.h"
#include "pipetrain/job/profile_job.h"
#include "pipetrain/job/train_checks.h"
#include "pipetrain/job/train_options.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/json_io.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

// The job, and what only the command line has: the model's sizes as typed, and whether
// to show each pass.
struct ProfileArgs {
  job::ProfileJob job;
  std::vector<std::string> model_options;  // KEY=VALUE, parsed into job.model_config
  std::string job_file;                    // --job: the whole job as JSON instead
  bool progress = false;
};

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", 1e3 * seconds);
  return buf;
}

void printTable(const job::ProfileJob& a, const job::ProfileOutcome& outcome) {
  const graph::LayerGraph& g = outcome.graph;
  std::printf("profile of %s at batch %lld: means of %d passes after %d or more warm-up passes; "
              "%d LibTorch intra-op threads, %d BLAS threads\n",
              (a.model.empty() ? a.model_file : a.model).c_str(), static_cast<long long>(a.batches[0]), outcome.timed_passes, a.options.warmup,
              at::get_num_threads(), profiler::blasThreads());
  if (a.load_data)
    std::printf("the forward time of the first layer that reads the model input includes loading a batch of %s\n",
                a.data.file.empty() ? a.data.name.c_str() : a.data.file.c_str());
  if (outcome.speedup.rounds > 0)
    std::printf("a training step ran %.2fx as fast on %d threads as on 1 (the median of %d rounds): `plan` prices a "
                "cluster's CPU devices that say their \"threads\" from it\n",
                outcome.speedup.speedup, g.profiledAs().threads, outcome.speedup.rounds);
  if (outcome.shares > 1)
    std::printf("share %d of %d: the other layers' times are left at 0 (their share's profile has them)\n",
                outcome.share, outcome.shares);
  // The name column fits the longest name ("transformer_h_11" of a captured GPT).
  int width = 14;
  for (const graph::Layer& l : g.layers()) width = std::max(width, static_cast<int>(l.name.size()));
  std::printf("%-*s %-18s %9s %9s %9s %9s %9s %12s %12s %12s\n", width, "layer", "kind", "F ms", "I ms", "W ms",
              "W alone", "step ms", "activation", "params", "peak memory");
  double f = 0, i = 0, w = 0, split_w = 0, step = 0;
  int64_t act = 0, params = 0;
  for (const graph::Layer& l : g.layers()) {
    std::printf("%-*s %-18s %9s %9s %9s %9s %9s %12s %12s %12s\n", width, l.name.c_str(), l.kind.c_str(),
                ms(l.forward_seconds).c_str(), ms(l.backward_input_seconds).c_str(),
                ms(l.backward_weight_seconds).c_str(), ms(l.splitWeightSeconds()).c_str(),
                ms(l.optimizer_seconds).c_str(), text::humanBytes(l.saved_activation_bytes).c_str(),
                text::humanBytes(l.param_bytes).c_str(),
                l.peak_memory_bytes >= 0 ? text::humanBytes(l.peak_memory_bytes).c_str() : "-");
    f += l.forward_seconds;
    i += l.backward_input_seconds;
    w += l.backward_weight_seconds;
    split_w += l.splitWeightSeconds();
    step += l.optimizer_seconds;
    act += l.saved_activation_bytes;
    params += l.param_bytes;
  }
  std::printf("%-*s %-18s %9s %9s %9s %9s %9s %12s %12s\n", width, "total", "", ms(f).c_str(), ms(i).c_str(), ms(w).c_str(),
              ms(split_w).c_str(), ms(step).c_str(), text::humanBytes(act).c_str(), text::humanBytes(params).c_str());
  for (std::size_t k = 1; k < a.batches.size(); ++k) {
    double passes = 0;
    for (int l = 0; l < g.size(); ++l) passes += g.secondsAt(l, a.batches[k]).forwardBackward();
    const double in_proportion = (f + i + w) * static_cast<double>(a.batches[k]) / static_cast<double>(a.batches[0]);
    std::printf("at batch %lld: F + I + W %s ms, %.2fx batch %lld's in proportion\n",
                static_cast<long long>(a.batches[k]), ms(passes).c_str(),
                in_proportion > 0 ? passes / in_proportion : 0.0, static_cast<long long>(a.batches[0]));
  }
}

// A line on stderr every few seconds at most (a small model's passes take
// milliseconds): which batch size, how far, how long it has left. `train` shows its
// first profiling process's (the others would say the same).
void printProgress(const profiler::ProfileProgress& p, int64_t batch, const std::vector<int64_t>& batches) {
  using Clock = std::chrono::steady_clock;
  static Clock::time_point last_line = Clock::now();
  if (Clock::now() - last_line < std::chrono::seconds(2)) return;
  last_line = Clock::now();
  const auto at = std::find(batches.begin(), batches.end(), batch) - batches.begin();
  std::string sizes;
  if (batches.size() > 1)
    sizes = " (size " + std::to_string(at + 1) + " of " + std::to_string(batches.size()) + ")";
  if (p.timing)
    std::fprintf(stderr, "profiling at micro-batch %lld%s: timed pass %d of at most %d, %.0f s so far, at most %.0f s left\n",
                 static_cast<long long>(batch), sizes.c_str(), p.timed, p.repeats, p.elapsed_seconds, p.seconds_left);
  else
    std::fprintf(stderr, "profiling at micro-batch %lld%s: warm-up pass %d, %.0f s so far, about %.0f s left\n",
                 static_cast<long long>(batch), sizes.c_str(), p.passes, p.elapsed_seconds, p.seconds_left);
}

int run(ProfileArgs& a) {
  if (!a.job_file.empty()) a.job = job::profileJobFromJson(json_io::readFile(a.job_file), a.job_file);
  else a.job.model_config = job::parseModelOptions(a.model_options);
  text::checkWritable(a.job.out, "--out");
  const job::ProfileOutcome outcome = job::runProfileJob(a.job, [&](const profiler::ProfileProgress& p, int64_t b) {
    if (a.progress) printProgress(p, b, a.job.batches);
  });
  printTable(a.job, outcome);
  std::printf("wrote %s\n", a.job.out.c_str());
  return 0;
}

}  // namespace

Command addProfileCommand(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand("profile", torchCommandDescription("profile"));
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto* zoo = cmd->add_option("--model", a->job.model, job::modelNameList());
  auto* file = cmd->add_option("--model-file", a->job.model_file, "your own TorchScript model (docs/byo.md)");
  zoo->excludes(file);
  auto* data_file = cmd->add_option("--data-file", a->job.data.file,
                                    "your own data (with --model-file, its input shape): loading a batch of it is "
                                    "timed into the first layer's forward pass");
  auto* dataset = cmd->add_option("--dataset", a->job.data.name,
                                  "fashion-mnist, fortunes or synthetic: loading a batch of it is timed into the "
                                  "first layer's forward pass, as `train` loads its micro-batches");
  dataset->excludes(data_file);
  cmd->add_option("--data-dir", a->job.data_dir, "with --dataset: where its files are (default: the Debian package's folder)");
  addOptions(cmd, job::tokenStreamOptions(a->job.data, "Options"));
  cmd->add_option("--model-option", a->model_options, "model size, KEY=INTEGER (e.g. layers=8 width=256)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--batch", a->job.batches,
                  "samples per measured batch (e.g. the micro-batch size); several (32,128): the layers are timed "
                  "at each, and the planners interpolate between them")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--warmup", a->job.options.warmup, "untimed passes over the model first; more until one touches no new memory page")->capture_default_str();
  cmd->add_option("--repeats", a->job.options.repeats, "timed passes over the model (each layer's mean is kept)")->capture_default_str();
  cmd->add_option("--optimizer", a->job.options.optimizer, "adam, adamw or sgd (momentum): optimizer state per parameter")
      ->capture_default_str();
  cmd->add_option("--min-repeats", a->job.options.min_repeats,
                  "stop timing after this many passes once their totals agree within --spread (0: time --repeats)")
      ->capture_default_str();
  cmd->add_option("--spread", a->job.options.spread, "with --min-repeats: how close the timed passes must agree")
      ->capture_default_str();
  cmd->add_flag("--time-every-layer", a->job.time_every_layer,
                "time each layer itself, even one identical to an earlier layer (which otherwise takes its times)");
  cmd->add_flag(job::kProgressOption, a->progress, "report each pass on stderr (pass, timed passes, time left)");
  cmd->add_option("--threads", a->job.threads,
                  "profile as a `train --nproc` rank with this many cores: BLAS threads (LibTorch's pool gets 1)");
  cmd->add_option("--share", a->job.share,
                  "K/P: time only share K of P (from 0), as one of P profiles run at once (`train` does)");
  cmd->add_option("--in-flight", a->job.options.in_flight,
                  "micro-batches held between their forward and backward passes, as a pipeline rank holds them")
      ->capture_default_str();
  cmd->add_option("--rendezvous", a->job.rendezvous,
                  "DIR: with --share, time together with the other shares' processes, which meet in DIR");
  cmd->add_option("--device", a->job.device,
                  "where the layers run: cpu, cuda (LOCAL_RANK's GPU), cuda:N, or auto (as train's --device)")
      ->capture_default_str();
  cmd->add_option("--precision", a->job.precision, "fp32, or bf16 (forward passes under autocast, as train's --precision)")
      ->capture_default_str();
  auto* out = cmd->add_option("--out", a->job.out, "the layer graph JSON to write");
  auto* job_file = cmd->add_option(job::kJobOption, a->job_file,
                                   "FILE: the whole job as JSON, as `train` hands it to its profiling processes "
                                   "(every option but --progress is in it)");
  return {cmd, [a, cmd, zoo, file, data_file, dataset, out, job_file] {
            if (*job_file) {
              for (const CLI::Option* o : cmd->get_options())
                if (o->count() > 0 && o != job_file && o->get_name() != job::kProgressOption)
                  throw Error("--job holds the whole job; drop " + o->get_name());
              return run(*a);
            }
            if (!*zoo && !*file) throw Error("profile needs --model NAME or --model-file FILE");
            if (!*out) throw Error("--out is required: the layer graph JSON to write");
            a->job.load_data = *data_file || *dataset;
            return run(*a);
          }};
}

}  // namespace pipetrain::cli
