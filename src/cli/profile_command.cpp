// `pipetrain profile`: measure a model's per-layer costs at a batch size and write them
// as a LayerGraph for `simulate --graph` and the planners (docs/profiling.md).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "commands.h"
#include "model_options.h"
#include "options.h"
#include "pipetrain/plan/profile_shares.h"
#include "pipetrain/torch/data.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/precision.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/util/allocator.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/process_memory.h"
#include "pipetrain/util/json_io.h"
#include "pipetrain/util/text.h"

namespace pipetrain::cli {
namespace {

struct ProfileArgs {
  std::string model;
  std::string model_file;
  // --dataset or --data-file: what the first stage loads (and a --model-file model's
  // input shape); load_data when either was given: loading a batch of it is timed.
  data::DataOptions data;
  bool load_data = false;
  std::string data_dir;  // --data-dir
  std::vector<std::string> model_options;
  // --batch: the profile's batch, then other sizes to time the layers at (other_batches).
  std::vector<int64_t> batches;
  profiler::ProfileOptions options;
  int threads = 0;  // 0 = leave LibTorch's and BLAS's defaults
  profiler::ThreadSpeedup speedup;  // measured where one process times the whole model on several threads
  std::string device = "cpu";  // where the layers run (runtime::rankDevice)
  std::string precision = "fp32";  // runtime::parsePrecision
  std::string share;  // "K/P": time share K of P (ProfileOptions::share)
  std::string rendezvous;  // with --share: the directory the shares' processes meet in
  std::string out;
  bool progress = false;
  bool time_every_layer = false;
  int timed_passes = 0;  // of the first batch size's profile, the graph's
};

// The shares' processes meet through files in one directory: `ready.R.K` once share K is
// ready to time its R-th profile (one per batch size), `done.R.K` once it has timed it
// (profiler::ProfileRendezvous).
class DirectoryRendezvous : public profiler::ProfileRendezvous {
 public:
  DirectoryRendezvous(std::string dir, int share, int shares)
      : dir_(std::move(dir)), share_(share), shares_(shares), parent_(getppid()) {}

  void readyToTime() override {
    ++round_;
    mark("ready");
    // Every process builds the model and settles its heap first: seconds for most
    // models, but a share of ResNet-50's passes at 32 images took a minute each. The
    // launcher ends them all when one fails (runLikeRanks); this is for shares started
    // by hand.
    const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
    while (count("ready") < shares_) {
      checkParent();
      if (std::chrono::steady_clock::now() > deadline)
        throw Error("profile share " + std::to_string(share_) + ": only " + std::to_string(count("ready")) + " of " +
                    std::to_string(shares_) + " profiles were ready to time after 10 min (" + dir_ + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    timing_since_ = std::chrono::steady_clock::now();
  }
  void doneTiming() override { mark("done"); }
  bool othersTiming() override {
    if (count("done") >= shares_) return false;
    checkParent();
    if (std::chrono::steady_clock::now() - timing_since_ > kWaitLimit)
      throw Error("profile share " + std::to_string(share_) + ": the other profiles were still timing after 10 min (" +
                  dir_ + ")");
    return true;
  }

 private:
  void mark(const std::string& what) const {
    const std::string path = dir_ + "/" + what + "." + std::to_string(round_) + "." + std::to_string(share_);
    std::ofstream file(path);
    if (!file) throw Error("--rendezvous: cannot write " + path);
  }
  // The launcher ends every share when one fails; when the launcher itself ends (the
  // kernel's out-of-memory killer took a launcher holding a 1.2B-parameter model), the
  // shares would wait out the limit for a share that will never come.
  void checkParent() const {
    if (getppid() != parent_)
      throw Error("profile share " + std::to_string(share_) + ": the process that started it has ended (killed? " +
                  "out of memory, the kernel's log says); stopping");
  }
  int count(const std::string& what) const {
    int n = 0;
    for (int k = 0; k < shares_; ++k)
      n += std::filesystem::exists(dir_ + "/" + what + "." + std::to_string(round_) + "." + std::to_string(k));
    return n;
  }

  static constexpr std::chrono::minutes kWaitLimit{10};
  std::string dir_;
  int share_, shares_;
  pid_t parent_;
  int round_ = 0;
  std::chrono::steady_clock::time_point timing_since_;
};

// "K/P" into ProfileOptions::share and shares.
void parseShare(const std::string& text, profiler::ProfileOptions& o) {
  const std::size_t slash = text.find('/');
  try {
    std::size_t used_k = 0, used_p = 0;
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    o.share = std::stoi(text.substr(0, slash), &used_k);
    o.shares = std::stoi(text.substr(slash + 1), &used_p);
    if (used_k != slash || used_p != text.size() - slash - 1) throw std::invalid_argument("trailing text");
  } catch (const std::exception&) {
    throw Error("--share must be K/P (share K of P, from 0), not '" + text + "'");
  }
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", 1e3 * seconds);
  return buf;
}

void printTable(const ProfileArgs& a, const graph::LayerGraph& g) {
  std::printf("profile of %s at batch %lld: medians of %d passes after %d or more warm-up passes; "
              "%d LibTorch intra-op threads, %d BLAS threads\n",
              (a.model.empty() ? a.model_file : a.model).c_str(), static_cast<long long>(a.batches[0]), a.timed_passes, a.options.warmup,
              at::get_num_threads(), profiler::blasThreads());
  if (a.load_data)
    std::printf("the forward time of the first layer that reads the model input includes loading a batch of %s\n",
                a.data.file.empty() ? a.data.name.c_str() : a.data.file.c_str());
  if (a.speedup.rounds > 0)
    std::printf("a training step ran %.2fx as fast on %d threads as on 1 (the median of %d rounds): `plan` prices a "
                "cluster's CPU devices that say their \"threads\" from it\n",
                a.speedup.speedup, g.profiledAs().threads, a.speedup.rounds);
  if (a.options.shares > 1)
    std::printf("share %d of %d: the other layers' times are left at 0 (their share's profile has them)\n",
                a.options.share, a.options.shares);
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
  for (int64_t b : a.batches)
    if (b < 1) throw Error("--batch must be at least 1, not " + std::to_string(b));
  if (a.batches.empty()) throw Error("--batch: give the batch size to time the layers at");
  for (std::size_t k = 1; k < a.batches.size(); ++k)
    if (std::count(a.batches.begin(), a.batches.begin() + static_cast<std::ptrdiff_t>(k), a.batches[k]))
      throw Error("--batch lists " + std::to_string(a.batches[k]) + " twice");
  if (a.threads < 0) throw Error("--threads must be at least 1");
  if (!a.share.empty()) parseShare(a.share, a.options);
  a.options.time_identical_once = !a.time_every_layer;
  if (!a.rendezvous.empty() && a.share.empty()) throw Error("--rendezvous needs --share K/P");
  std::optional<DirectoryRendezvous> rendezvous;
  if (!a.rendezvous.empty()) {
    if (!std::filesystem::is_directory(a.rendezvous))
      throw Error("--rendezvous " + a.rendezvous + ": no such directory");
    a.options.rendezvous = &rendezvous.emplace(a.rendezvous, a.options.share, a.options.shares);
  }
  a.options.precision = runtime::parsePrecision(a.precision);
  const models::ModelConfig config = parseModelOptions(a.model_options);
  profiler::optimizerStateBytes(a.options.optimizer, 0);  // known optimizer?
  checkWritable(a.out, "--out");
  const int64_t code_before = util::residentFileBytes();
  models::Model model = runtime::openModel(a.model, config, 0, a.model_file, a.data);
  // On a GPU the passes are timed from an idle device to an idle device, and memory is
  // the caching allocator's (profiler::MemoryProbe).
  const torch::Device device = runtime::rankDevice(a.device, runtime::localRank(0));
  models::moveTo(model, device);
  const int64_t anon_before = util::residentAnonBytes(), free_before = util::heapFreeBytes();
  int64_t data_anon_bytes = 0, workspace_bytes = 0;
  if (a.threads > 0) profiler::useThreadsOfARank(a.threads);
  // The batches a first stage would load: consecutive micro-batches of epoch 0's order.
  std::unique_ptr<data::Dataset> dataset;
  std::optional<data::SampleOrder> order;
  int64_t next = 0, batch = 0;
  graph::ProcessMemory process;  // what holding the dataset costs a rank that loads it
  int64_t data_file_bytes = 0;
  if (a.load_data) {
    if (!a.data_dir.empty()) a.data.fashion_mnist_dir = a.data.fortunes_dir = a.data_dir;
    const int64_t before = util::residentBytes(), file_before = util::residentFileBytes();
    dataset = data::openDataset(a.data, model.input);
    process.data_bytes = std::max<int64_t>(0, util::residentBytes() - before);
    data_file_bytes = util::residentFileBytes() - file_before;  // a data file's mapped pages
    data_anon_bytes = process.data_bytes - data_file_bytes;
    order.emplace(data::sampleOrder(a.data, dataset.get(), dataset->size(), a.data.seed, 0));
    const int64_t largest = *std::max_element(a.batches.begin(), a.batches.end());
    if (order->minibatchesPerEpoch(largest, 1) == 0)
      throw Error("the dataset has " + std::to_string(dataset->size()) + " samples, fewer than --batch " +
                  std::to_string(largest));
    a.options.load_batch = [&] {
      dataset->get(order->microbatch(next++ % order->minibatchesPerEpoch(batch, 1), 0, batch, 1));
    };
  }
  // One profile per batch size, the first the graph's; the others' compute times become
  // its layers' other_batches (what a pass costs beyond its samples: docs/profiling.md).
  std::vector<graph::LayerGraph> profiles;
  int timed_first = 0;
  for (int64_t b : a.batches) {
    batch = b;
    next = 0;
    a.options.progress = [&](const profiler::ProfileProgress& p) {
      a.timed_passes = p.timed;
      if (a.progress) printProgress(p, b, a.batches);
    };
    profiles.push_back(profiler::profileModel(model, b, a.options));
    if (profiles.size() > 1) continue;
    timed_first = a.timed_passes;
    // What the kernels' first calls allocated, keep and touched (the libraries' workspaces
    // and caches): the anonymous pages the first size's passes added, less the dataset's
    // and the heap's freed ones (the tensors'). The heap in use counts blocks a kernel
    // allocated and never wrote, which take no page: the mlp's 9.7 MiB in use were 1.7
    // touched, gpt's 14.4 were 2.1. At the first size only: the later sizes add what a
    // process that ran several sizes keeps, which a rank, at one size, does not
    // (docs/profiling.md#memory-the-process-holds).
    if (free_before >= 0)  // the allocator's figures: glibc's or tcmalloc's (util/process_memory.h)
      workspace_bytes = std::max<int64_t>(0, util::residentAnonBytes() - anon_before - data_anon_bytes -
                                                 (util::heapFreeBytes() - free_before));
  }
  profiles = plan::sizesAtOneCoreSpeed(std::move(profiles));
  graph::LayerGraph g = profiles.size() == 1
                           ? profiles[0]
                           : profiles[0].withOtherBatches({profiles.begin() + 1, profiles.end()}, "profile");
  // Until a run measures the rest, a rank's framework memory is what this process holds
  // as a rank does: the LibTorch code its passes paged in (less the data file's pages,
  // which data_bytes counts) and the workspaces its kernels keep
  // (docs/profiling.md#memory-the-process-holds). A GPU's memory holds none of it.
  if (device.is_cpu())
    process.framework_bytes =
        std::max<int64_t>(0, util::residentFileBytes() - code_before - data_file_bytes) + workspace_bytes;
  process.heap = util::heapName();  // the ranks' too, by the profile cache's key
  g.setProcessMemory(process);
  const int threads = profiler::computeThreads();
  // One process timing the whole model on several threads: how a step divides over them,
  // for ranks that will compute on fewer (NOTE(thread-speedup)).
  if (device.is_cpu() && a.options.shares == 1 && threads > 1)
    a.speedup = profiler::threadSpeedup(model, a.batches[0], a.options.precision);
  g.setProfiledAs({threads, a.options.shares, profiles[0].profiledAs().probe_seconds, a.speedup.speedup});
  a.timed_passes = timed_first;
  printTable(a, g);
  json_io::writeFile(a.out, g.toJson());
  std::printf("wrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace

Command addProfileCommand(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand("profile", torchCommandDescription("profile"));
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto* zoo = cmd->add_option("--model", a->model, modelNameList());
  auto* file = cmd->add_option("--model-file", a->model_file, "your own TorchScript model (docs/byo.md)");
  zoo->excludes(file);
  auto* data_file = cmd->add_option("--data-file", a->data.file,
                                    "your own data (with --model-file, its input shape): loading a batch of it is "
                                    "timed into the first layer's forward pass");
  auto* dataset = cmd->add_option("--dataset", a->data.name,
                                  "fashion-mnist, fortunes or synthetic: loading a batch of it is timed into the "
                                  "first layer's forward pass, as `train` loads its micro-batches");
  dataset->excludes(data_file);
  cmd->add_option("--data-dir", a->data_dir, "with --dataset: where its files are (default: the Debian package's folder)");
  addTokenStreamOptions(cmd, a->data);
  cmd->add_option("--model-option", a->model_options, "model size, KEY=INTEGER (e.g. layers=8 width=256)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--batch", a->batches,
                  "samples per measured batch (e.g. the micro-batch size); several (32,128): the layers are timed "
                  "at each, and the planners interpolate between them")
      ->required()
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--warmup", a->options.warmup, "untimed passes over the model first; more until one touches no new memory page")->capture_default_str();
  cmd->add_option("--repeats", a->options.repeats, "timed passes over the model (each layer's median is kept)")->capture_default_str();
  cmd->add_option("--optimizer", a->options.optimizer, "adam, adamw or sgd (momentum): optimizer state per parameter")
      ->capture_default_str();
  cmd->add_option("--min-repeats", a->options.min_repeats,
                  "stop timing after this many passes once their totals agree within --spread (0: time --repeats)")
      ->capture_default_str();
  cmd->add_option("--spread", a->options.spread, "with --min-repeats: how close the timed passes must agree")
      ->capture_default_str();
  cmd->add_flag("--time-every-layer", a->time_every_layer,
                "time each layer itself, even one identical to an earlier layer (which otherwise takes its times)");
  cmd->add_flag("--progress", a->progress, "report each pass on stderr (pass, timed passes, time left)");
  cmd->add_option("--threads", a->threads,
                  "profile as a `train --nproc` rank with this many cores: BLAS threads (LibTorch's pool gets 1)");
  cmd->add_option("--share", a->share,
                  "K/P: time only share K of P (from 0), as one of P profiles run at once (`train` does)");
  cmd->add_option("--in-flight", a->options.in_flight,
                  "micro-batches held between their forward and backward passes, as a pipeline rank holds them")
      ->capture_default_str();
  cmd->add_option("--rendezvous", a->rendezvous,
                  "DIR: with --share, time together with the other shares' processes, which meet in DIR");
  cmd->add_option("--device", a->device,
                  "where the layers run: cpu, cuda (LOCAL_RANK's GPU), cuda:N, or auto (as train's --device)")
      ->capture_default_str();
  cmd->add_option("--precision", a->precision, "fp32, or bf16 (forward passes under autocast, as train's --precision)")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "the layer graph JSON to write")->required();
  return {cmd, [a, zoo, file, data_file, dataset] {
            if (!*zoo && !*file) throw Error("profile needs --model NAME or --model-file FILE");
            a->load_data = *data_file || *dataset;
            return run(*a);
          }};
}

}  // namespace pipetrain::cli
