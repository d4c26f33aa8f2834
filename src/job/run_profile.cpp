#include "pipetrain/job/run_profile.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "pipetrain/job/launcher.h"
#include "pipetrain/job/profile_job.h"
#include "pipetrain/report/pages.h"
#include "pipetrain/plan/profile_shares.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/torch/torch_info.h"
#include "pipetrain/util/allocator.h"
#include "pipetrain/util/clock.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::job {
namespace {

// The profile's passes (ProfileOptions): warm-up at least, then timed until steady
// (profile_model.cpp, NOTE(settling) and NOTE(repeats)).
constexpr int kWarmup = 2, kMinRepeats = 3, kRepeats = 5;
// What a profile will cost (timedSizes, NOTE(profile cost)), in training steps of the
// whole model at the size timed: per size, each process sets every layer up (a forward
// pass) and measures its memory (a whole and a split forward and backward pass), then
// runs the warm-up passes, at least one to settle, the fewest timed ones and one to
// spare. A pass is a forward pass without a graph, then k micro-batches' forward and
// backward passes twice (whole and split), over the layers the process times, and an
// optimizer step over their weights after each of the two.
constexpr double kSetupSteps = 1.0 / 3 + 2;
constexpr double kPassesPerSize = kWarmup + 1 + kMinRepeats + 1;
double passSteps(int in_flight) { return 1.0 / 3 + 2.0 * in_flight; }
constexpr double kOptimizerStepsPerPass = 2;
// Before its first pass, a profiling process loads LibTorch, builds the model and opens
// the dataset: about a second for ResNet-50 on this machine (docs/profiling.md).
constexpr double kProcessStartSeconds = 1;
// NOTE(size choice): the sizes are chosen by a yardstick, not by that price: per size, 8
// passes of 3 whole-model training steps over 1.5 / P of the model must fit 20
// "seconds". The yardstick under-prices a profile up to 4.7x, but it chooses the sizes
// every plan and bench so far was measured with. Chosen by the honest price at the same
// 20 s, tv-vgg's sizes became 2 and 16, and at 1 Gb/s its 1f1b plan then took
// micro-batches of 8 and ran at about half the speed of the 32s it had run before
// (docs/profiling.md, "An estimate that holds"). Which sizes to buy with a budget is the
// planner's question (how it prices a size above the largest timed), left for when it can
// be measured across the race; the console says what the profile will really take.
constexpr double kSizeBudget = 20;
constexpr double kYardstickPassesPerSize = kWarmup + 2 + kMinRepeats + 1;
constexpr double kYardstickStepsPerPass = 3;
constexpr double kYardstickBusiestShare = 1.5;
// A pass at 2 samples cheaper than this is also timed at 8 (NOTE(pass cost)); a dearer
// one prices the sizes in proportion.
constexpr double kCheapPassSeconds = 1.0;

// The largest size worth timing: with a batch, 4x the largest power of two up to 32
// that divides it, at most the batch, since a larger micro-batch costs less per sample
// (docs/profiling.md, "At several batch sizes"); without, the run's micro-batch size.
int64_t wantedSize(const ProfileRequest& r) {
  if (r.args.batch <= 0) return r.args.microbatch_size;
  int64_t p = 1;
  while (p < 32 && r.args.batch % (2 * p) == 0) p *= 2;
  return std::min(r.args.batch, 4 * p);
}

// With a batch, the smaller of the two sizes timed: 4 micro-batches per rank of the
// larger, so that a pipeline over every rank can have 4 per stage (on 3 ranks a batch of
// 96 split in 4 left a 3-stage pipeline a third idle, and its plan lost to DDP).
int64_t lowSize(const ProfileRequest& r, int64_t top) { return top / (4 * std::max(1, r.ranks)); }

// How the ranks will be profiled: how many processes at once, and what each holds.
struct Processes {
  int count = 1;
  std::vector<int> in_flight;  // micro-batches held between forward and backward, per process
};

// `pipetrain profile` as the ranks will run: one process per rank with a rank's thread
// settings, all at once, so that ranks sharing caches and memory share them while
// profiled too (docs/profiling.md, "Profiled as a rank runs"). Each process times its
// share of the layers (plan/profile_shares.h) with as many micro-batches in flight as
// the schedule's rank holds (profile_model.cpp, NOTE(in-flight)), so that it streams a
// rank's weights and activations, not the whole model's, through the caches it shares;
// and they time together (ProfileRendezvous). With more ranks than the cores run at
// once, only as many profile as run at once: the profile is then a core's speed, and
// the cluster says that the ranks share the cores: time-slicing left in the profile
// would be counted twice, and it lands unevenly.
//
// On GPUs, one process per GPU the ranks use (each takes GPU LOCAL_RANK, as rank k
// does): ranks that share a GPU share it while they train, and one profile of it is
// the GPU's speed, as one of the cores is the cores'.
Processes processesFor(const ProfileRequest& r, const torch::Device& device) {
  Processes p;
  p.count = device.is_cpu() ? std::min(r.ranks, std::max(1, r.cores / r.blas_threads))
                            : std::min(r.ranks, runtime::deviceKind(device).count());
  // 1F1B's under auto; with a batch, at the most micro-batches the planner may choose.
  const int microbatches =
      r.args.batch > 0 ? static_cast<int>(r.args.batch / std::max<int64_t>(1, lowSize(r, wantedSize(r)))) : r.args.microbatches;
  p.in_flight = plan::profileInFlight(r.args.schedule.name, p.count, microbatches);
  return p;
}

struct Sizes {
  std::vector<int64_t> timed;  // the graph's batch size first
  double estimated_seconds = 0;
};

// The sizes to time: with a batch, two 4 x ranks apart (lowSize), and every size the
// planner may choose between them (planner::defaultMicrobatchSizes) that the budget
// leaves room for; the run's own without. The planners interpolate linearly between
// neighbours (LayerGraph::secondsAt), and a pass is not affine in its samples over a 4 x
// ranks span (docs/predictions.md, "The runs people start"). The sizes shrink until the
// two ends fit kSizeBudget by a yardstick of training passes of the model at two and
// eight samples (NOTE(pass cost), NOTE(size choice)): unbounded, a large CNN's profile
// took minutes before a run of seconds (docs/profiling.md, "What `train` pays before it
// trains"). Above the larger size the costs then follow the line through the two
// largest (LayerGraph::secondsAt), which the run's measured stage times correct
// (sharpenCachedProfile).
//
// On a GPU the sizes are the wanted ones: its passes take milliseconds, and pricing
// them here would put the model on the GPU in this process, which the ranks then start
// beside (a CPU pass of a billion-parameter gpt at two samples takes minutes).
Sizes timedSizes(const models::Model& model, const ProfileRequest& r, const std::string& optimizer,
                 const Processes& processes, const torch::Device& device, const Say& say) {
  // The planner's sizes strictly between the two ends, smallest first.
  const auto between = [&](int64_t low, int64_t top) {
    std::vector<int64_t> inner;
    if (r.args.batch > 0)
      for (int64_t b : planner::defaultMicrobatchSizes(r.args.batch, low))
        if (b > low && b < top) inner.push_back(b);
    return inner;
  };
  if (!device.is_cpu()) {
    const int64_t top = wantedSize(r);
    const int64_t low = r.args.batch > 0 ? std::max<int64_t>(2, lowSize(r, top)) : top;
    Sizes s{{std::min(low, top)}, 0};
    if (low < top) {
      for (int64_t b : between(low, top)) s.timed.push_back(b);
      s.timed.push_back(top);
    }
    return s;
  }
  // Two samples, not one: BatchNorm refuses to train on one value per channel, which is
  // what a ResNet's last blocks see of a single 28 x 28 image. NOTE(pass cost): a pass
  // is priced as a fixed part and a part per sample, from passes at 2 and at 8 samples:
  // priced in proportion from 2, a model whose weights dominate (torchvision's vgg11 at
  // 32 x 32, one layer of hundreds of MB streamed once a pass whatever its samples) was
  // priced far too dear at large sizes, the budget left it tiny micro-batches, and the
  // planner chose slow ones (docs/runtime.md, "Where the gap is: the profile's
  // micro-batch sizes").
  const double at_two = profiler::stepSeconds(model, 2, r.blas_threads);
  // The second pass only where it costs seconds, not minutes (a model of billions).
  const int64_t second = at_two < kCheapPassSeconds ? std::min<int64_t>(8, wantedSize(r)) : 2;
  const double per_sample =
      second > 2 ? std::max(0.0, (profiler::stepSeconds(model, second, r.blas_threads) - at_two) /
                                     static_cast<double>(second - 2))
                 : at_two / 2;
  const double fixed = std::max(0.0, at_two - 2 * per_sample);
  // The yardstick the sizes are chosen by (NOTE(size choice)).
  const double busiest_share = std::min(1.0, kYardstickBusiestShare / processes.count);
  const auto yardstick = [&](int64_t size) {
    return kYardstickPassesPerSize * kYardstickStepsPerPass * (fixed + per_sample * static_cast<double>(size)) *
           busiest_share;
  };
  // Where that leaves a size of one, the model must train on one sample: BatchNorm on a
  // 1 x 1 map does not (DenseNet's last block on 32 x 32 images), so the sizes stay at 2
  // or more, and the planner, which starts at the smallest profiled, never proposes 1.
  int64_t smallest = 1;
  const auto lowOf = [&](int64_t size) { return r.args.batch > 0 ? std::max<int64_t>(smallest, lowSize(r, size)) : size; };
  const auto endsOf = [&](int64_t top) { return yardstick(top) + (lowOf(top) < top ? yardstick(lowOf(top)) : 0); };
  int64_t top = wantedSize(r);
  while (top > 1 && endsOf(top) > kSizeBudget) top /= 2;
  if (r.args.batch > 0 && lowOf(top) == 1) {
    try {
      profiler::stepSeconds(model, 1, r.blas_threads);
    } catch (const std::exception& e) {
      smallest = 2;
      top = std::max<int64_t>(top, std::min<int64_t>(2, wantedSize(r)));
      say(formatted("note: micro-batches of 2 samples or more: %s", e.what()));
    }
  }
  const int64_t low = lowOf(top);
  Sizes s{{low}, 0};
  if (low < top) {
    double spent = endsOf(top);
    for (int64_t b : between(low, top))
      if (spent + yardstick(b) <= kSizeBudget) {
        s.timed.push_back(b);
        spent += yardstick(b);
      }
    s.timed.push_back(top);
  }
  // NOTE(profile cost): what the profile will take. The processes time at once, so the
  // profile takes what the busiest takes. Its share of the work is measured, not assumed:
  // the shares are split by parameters, so a CNN's first share holds nearly all its
  // compute, and a share of a transformer's identical blocks times one of them. Each
  // pass also steps the optimizer over the share's weights, whatever the size: on a
  // model whose weights dominate, the dearest part of a pass (docs/profiling.md).
  const std::vector<profiler::ShareWork> shares = profiler::shareWork(model, 2, processes.count, r.blas_threads);
  const double step_per_parameter = profiler::optimizerSecondsPerParameter(optimizer, r.blas_threads);
  s.estimated_seconds = kProcessStartSeconds;
  for (int64_t b : s.timed) {
    const double step = fixed + per_sample * static_cast<double>(b);  // the whole model's
    double busiest = 0;
    for (int k = 0; k < processes.count; ++k)
      busiest =
          std::max(busiest, kPassesPerSize * (passSteps(processes.in_flight[k]) * shares[k].forward_fraction * step +
                                              kOptimizerStepsPerPass * step_per_parameter *
                                                  static_cast<double>(shares[k].stepped_parameters)));
    s.estimated_seconds += kSetupSteps * step + busiest;
  }
  return s;
}

std::string joined(const std::vector<int64_t>& sizes) {
  std::string text;
  for (int64_t b : sizes) text += (text.empty() ? "" : ",") + std::to_string(b);
  return text;
}

// One process per share, each handed its part of the job as a file beside `out`
// (`pipetrain profile --job FILE`, job::profileJobToJson).
std::vector<std::vector<std::string>> profileCommands(const runtime::TrainConfig& config, const Processes& processes,
                                                      const Sizes& sizes, const std::string& out,
                                                      const std::string& rendezvous) {
  std::vector<std::vector<std::string>> commands;
  for (int k = 0; k < processes.count; ++k) {
    ProfileJob job;
    job.batches = sizes.timed;
    job.options.optimizer = config.optimizer.name;
    job.options.warmup = kWarmup;
    job.options.repeats = kRepeats;
    job.options.min_repeats = kMinRepeats;
    job.options.in_flight = processes.in_flight[k];
    job.share = std::to_string(k) + "/" + std::to_string(processes.count);
    job.rendezvous = rendezvous;
    job.device = config.device;
    job.precision = config.precision;
    job.out = k == 0 ? out : out + "." + std::to_string(k);
    // The dataset too: the first stage's forward passes load its micro-batches
    // (profile_model.cpp, NOTE(input-loading)).
    job.load_data = true;
    job.model_config = config.model_config;
    if (config.model_file.empty()) {
      job.model = config.model;
      job.data.name = config.data.name;
      if (config.data.fashion_mnist_dir != data::DataOptions().fashion_mnist_dir)
        job.data_dir = config.data.fashion_mnist_dir;
    } else {
      job.model_file = config.model_file;
      job.data.file = config.data.file;
      if (data::isTokenStream(config.data.file)) {
        job.data.context = config.data.context;
        job.data.token_dtype = config.data.token_dtype;
      }
    }
    const std::string job_file = rendezvous + "/job." + std::to_string(k) + ".json";
    json_io::writeFile(job_file, profileJobToJson(job));
    commands.push_back(childCommand("profile", job_file, /*progress=*/k == 0));  // the others would say the same
  }
  return commands;
}

// The profiles `path`, `path.1`, ... of one model, taken in shares (process k timed
// share k), merged into `path`; the others are removed.
graph::LayerGraph mergeProfiles(const std::string& path, int count) {
  std::vector<graph::LayerGraph> graphs;
  for (int k = 0; k < count; ++k) {
    const std::string file = k == 0 ? path : path + "." + std::to_string(k);
    graphs.push_back(graph::LayerGraph::load(file));
    if (k > 0) std::remove(file.c_str());
  }
  const graph::LayerGraph merged = plan::mergeProfileShares(graphs);
  json_io::writeFile(path, merged.toJson());
  return merged;
}

graph::LayerGraph measure(const runtime::TrainConfig& config, const models::Model& model, const ProfileRequest& r,
                          const Processes& processes, const torch::Device& device, const std::string& out,
                          const Say& say) {
  const auto pricing = std::chrono::steady_clock::now();
  const Sizes sizes = timedSizes(model, r, config.optimizer.name, processes, device, say);
  const double pricing_seconds = secondsSince(pricing);
  // The processes time together (profiler::ProfileRendezvous), meeting in this directory.
  const std::string rendezvous = out + ".rendezvous";
  std::filesystem::remove_all(rendezvous);
  std::filesystem::create_directories(rendezvous);
  struct RemoveAfter {
    const std::string& dir;
    ~RemoveAfter() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_after{rendezvous};
  std::string held;
  for (int k : processes.in_flight) held += (held.empty() ? "" : ",") + std::to_string(k);
  if (device.is_cpu())
    say(formatted(
        "profiling %s at micro-batch %s in %d processes at once, %d BLAS thread(s) each, as the ranks run%s: "
        "a share of the layers each, micro-batches in flight %s; about %.0f s (the sizes were chosen in %.1f s)",
        config.model.c_str(), joined(sizes.timed).c_str(), processes.count, r.blas_threads,
        processes.count < r.ranks ? " (the ranks then share the cores)" : "", held.c_str(), sizes.estimated_seconds,
        pricing_seconds));
  else
    say(formatted("profiling %s at micro-batch %s on %s in %d process(es) at once, one per GPU, at %s%s: a share of "
                  "the layers each, micro-batches in flight %s",
                  config.model.c_str(), joined(sizes.timed).c_str(), runtime::describeDevice(device).c_str(),
                  processes.count, config.precision.c_str(),
                  processes.count < r.ranks ? " (the ranks then share the GPUs)" : "", held.c_str()));
  runLikeRanks(profileCommands(config, processes, sizes, out, rendezvous), r.blas_threads,
               std::chrono::seconds(r.timeout_seconds));
  return mergeProfiles(out, processes.count);
}

// Everything the profile's numbers depend on (graph/profile_cache.h): the model (a
// file by its bytes), what the first stage loads, the largest size wanted (the sizes
// timed follow from it and the model's cost), the processes with their threads and
// micro-batches in flight, the method (this build of pipetrain, LibTorch's version)
// and the machine.
graph::ProfileKey profileKey(const runtime::TrainConfig& config, const ProfileRequest& r, const Processes& processes,
                             const torch::Device& device) {
  graph::ProfileKey key;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto bytes = ec ? 0 : std::filesystem::file_size(self, ec);
  const auto written = ec ? 0 : std::filesystem::last_write_time(self, ec).time_since_epoch().count();
  key.add("pipetrain", self.string() + " " + std::to_string(bytes) + " " + std::to_string(written));
  key.add("libtorch", torchside::torchVersion());
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  key.add("host", std::string(host) + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores");
  if (config.model_file.empty()) {
    std::vector<std::string> options = r.model_options;
    std::sort(options.begin(), options.end());
    std::string model = config.model;
    for (const std::string& o : options) model += " " + o;
    key.add("model", model);
    key.add("data", config.data.name + " " + config.data.fashion_mnist_dir);
  } else {
    key.add("model file", graph::fileDigest(config.model_file));
    const auto data_bytes = std::filesystem::file_size(config.data.file, ec);
    key.add("data file", config.data.file + " " + std::to_string(ec ? 0 : data_bytes));
  }
  key.add("device", runtime::describeDevice(device));  // "cpu", or "cuda:0 (NVIDIA H200)"
  key.add("precision", config.precision);
  key.add("optimizer", config.optimizer.name);
  // What the process holds beyond its tensors, which runs teach the profile, is the
  // allocator's (util/allocator.h): this process's is its ranks'.
  key.add("heap", util::heapName());
  key.add("largest size", std::to_string(wantedSize(r)) +
                              (r.args.batch > 0 ? " down to a quarter per rank, the planner's sizes between" : ""));
  std::string held;
  for (int k : processes.in_flight) held += (held.empty() ? "" : ",") + std::to_string(k);
  key.add("processes", std::to_string(processes.count) + " x " + std::to_string(r.blas_threads) +
                           " threads, in flight " + held);
  key.add("passes", std::to_string(kWarmup) + " warm-up, " + std::to_string(kMinRepeats) + " to " +
                        std::to_string(kRepeats) + " timed, identical layers once, budget " +
                        std::to_string(kSizeBudget));
  return key;
}

}  // namespace

RunProfile profileForRun(const runtime::TrainConfig& config, const models::Model& model, const ProfileRequest& r,
                         const std::string& out, const Say& say) {
  const torch::Device device = runtime::rankDevice(config.device, 0);
  const Processes processes = processesFor(r, device);
  const graph::ProfileCache cache(graph::ProfileCache::defaultDir());
  RunProfile run{{}, "", profileKey(config, r, processes, device), {}};
  const auto start = std::chrono::steady_clock::now();
  std::string problem;
  const std::optional<graph::CachedProfile> cached = r.reprofile ? std::nullopt : cache.find(run.key, &problem);
  if (!problem.empty()) say(formatted("the profile cache's entry cannot be used (%s): profiling again", problem.c_str()));
  if (cached) {
    run.graph = cached->graph;
    run.cached_path = cached->path;
    json_io::writeFile(out, run.graph.toJson());
    say(formatted("profile: from the cache, %s (measured %s in %.0f s%s; --reprofile measures again)",
                cached->path.c_str(), cached->created.c_str(), cached->profiling_seconds,
                cached->runs_merged > 0 ? (", sharpened by " + std::to_string(cached->runs_merged) + " run(s)").c_str()
                                        : ""));
    run.source = {cached->path, true, cached->profiling_seconds, cached->created, cached->runs_merged, 0};
  } else {
    run.graph = measure(config, model, r, processes, device, out, say);
    const double seconds = secondsSince(start);
    try {
      run.cached_path = cache.store(run.key, run.graph, seconds);
      say(formatted("profiled in %.1f s; kept in the profile cache for the next run: %s", seconds,
                  run.cached_path.c_str()));
    } catch (const Error& e) {
      say(formatted("profiled in %.1f s; not kept for the next run: %s", seconds, e.what()));
    }
    run.source = {run.cached_path, false, seconds, "", 0, 0};
  }
  run.source.seconds = secondsSince(start);
  return run;
}

RunMemory runMemory(const std::vector<report::RankSummary>& ranks_run, const report::ChosenPrediction& chosen) {
  RunMemory m;
  const std::vector<int64_t>& peak = chosen.rank_peak_memory_bytes;
  const std::vector<int64_t>& process = chosen.rank_process_bytes;
  std::vector<plan::RankMemoryMeasured> ranks;
  std::string heap;  // the ranks' allocator, the same for all: the launcher's environment
  for (const report::RankSummary& r : ranks_run) {
    const auto rank = static_cast<std::size_t>(r.rank);
    // A GPU's memory is its allocator's; the resident set tells only the host's.
    if (r.device != "cpu" || rank >= peak.size() || rank >= process.size()) continue;
    m.data_bytes = std::max(m.data_bytes, r.data_memory_bytes);
    heap = r.heap;
    ranks.push_back({r.memoryAddedByTraining(), static_cast<double>(peak[rank] - process[rank]),
                     r.data_memory_bytes});
  }
  m.framework_bytes = plan::frameworkBytesOfRun(ranks, heap);
  return m;
}

void sharpenCachedProfile(const report::ProfileSource& profile, const plan::Plan& plan, const RunLearning& run,
                          const Say& say) {
  const plan::StageSeconds& measured = run.stage_seconds;
  const RunMemory& memory = run.memory;
  const std::string& path = profile.path;
  if (path.empty()) return;
  try {
    const graph::ProfileCache cache(std::filesystem::path(path).parent_path().string());
    const graph::LayerGraph before = graph::LayerGraph::load(path);
    plan::SharpenedProfile after =
        plan::sharpenProfile(before, plan, measured, profile.runs_merged, run.probe_seconds);
    std::string learned;
    if (memory.framework_bytes >= 0) {
      after.graph.setProcessMemory(
          plan::learnProcessMemory(before.processMemory(), memory.framework_bytes, memory.data_bytes));
      const graph::ProcessMemory& m = after.graph.processMemory();
      learned = "; the process's memory beyond its tensors: framework " + text::humanBytes(m.framework_bytes) +
                " (mean of " + std::to_string(m.runs) + " run(s)), data " + text::humanBytes(m.data_bytes);
    }
    if (run.action_overhead >= 0) {
      after.graph.setActionOverhead(plan::learnActionOverhead(before.actionOverhead(), run.action_overhead));
      const graph::LearnedActionOverhead& a = after.graph.actionOverhead();
      learned += formatted("; the runtime's own time per action %.1f us (mean of %d run(s))", a.seconds * 1e6, a.runs);
    }
    const int runs = cache.refine(path, after.graph);
    say(formatted("profile sharpened by this run's %s (%s; %d run(s) merged%s): %s",
                measured.empty() ? "memory" : "stage times", measured.empty() ? "times kept" : after.note.c_str(), runs,
                learned.c_str(), path.c_str()));
  } catch (const Error& e) {
    say(formatted("the cached profile was not sharpened: %s", e.what()));
  }
}

}  // namespace pipetrain::job
