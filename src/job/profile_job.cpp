#include "pipetrain/job/profile_job.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "pipetrain/plan/profile_shares.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/precision.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/util/allocator.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/json_io.h"
#include "pipetrain/util/process_memory.h"

namespace pipetrain::job {
namespace {

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

}  // namespace

json_io::Json profileJobToJson(const ProfileJob& job) {
  const profiler::ProfileOptions& o = job.options;
  return {{"format", "pipetrain.profile-job"}, {"version", 1},
          {"model", job.model}, {"model_file", job.model_file}, {"model_config", job.model_config},
          {"data", {{"name", job.data.name}, {"file", job.data.file}, {"context", job.data.context},
                    {"token_dtype", job.data.token_dtype}}},
          {"load_data", job.load_data}, {"data_dir", job.data_dir}, {"batches", job.batches},
          {"warmup", o.warmup}, {"repeats", o.repeats}, {"min_repeats", o.min_repeats}, {"spread", o.spread},
          {"optimizer", o.optimizer}, {"in_flight", o.in_flight}, {"threads", job.threads},
          {"device", job.device}, {"precision", job.precision}, {"share", job.share},
          {"rendezvous", job.rendezvous}, {"time_every_layer", job.time_every_layer}, {"out", job.out}};
}

ProfileJob profileJobFromJson(const json_io::Json& j, const std::string& origin) {
  const json_io::JsonCursor c(j, origin);
  c.allowOnly({"format", "version", "model", "model_file", "model_config", "data", "load_data", "data_dir", "batches",
               "warmup", "repeats", "min_repeats", "spread", "optimizer", "in_flight", "threads", "device",
               "precision", "share", "rendezvous", "time_every_layer", "out"});
  if (c.field("format").asString() != "pipetrain.profile-job")
    c.field("format").fail("expected \"pipetrain.profile-job\"");
  c.field("version").asIntIn(1, 1);
  ProfileJob job;
  job.model = c.field("model").asString();
  job.model_file = c.field("model_file").asString();
  const json_io::JsonCursor config = c.field("model_config");
  if (!config.node().is_object()) config.fail("expected an object of sizes");
  for (const auto& [key, value] : config.node().items()) job.model_config[key] = config.field(key).asInt();
  const json_io::JsonCursor data = c.field("data");
  data.allowOnly({"name", "file", "context", "token_dtype"});
  job.data.name = data.field("name").asString();
  job.data.file = data.field("file").asString();
  job.data.context = data.field("context").asNonNegativeInt();
  job.data.token_dtype = data.field("token_dtype").asString();
  job.load_data = c.field("load_data").asBool();
  job.data_dir = c.field("data_dir").asString();
  for (const json_io::JsonCursor& b : c.field("batches").asArray()) job.batches.push_back(b.asInt());
  profiler::ProfileOptions& o = job.options;
  o.warmup = static_cast<int>(c.field("warmup").asIntIn(0, 1000));
  o.repeats = static_cast<int>(c.field("repeats").asIntIn(1, 1000));
  o.min_repeats = static_cast<int>(c.field("min_repeats").asIntIn(0, 1000));
  o.spread = c.field("spread").asNumberIn(0, 1);
  o.optimizer = c.field("optimizer").asString();
  o.in_flight = static_cast<int>(c.field("in_flight").asIntIn(1, 1 << 16));
  job.threads = static_cast<int>(c.field("threads").asIntIn(0, 1 << 16));
  job.device = c.field("device").asString();
  job.precision = c.field("precision").asString();
  job.share = c.field("share").asString();
  job.rendezvous = c.field("rendezvous").asString();
  job.time_every_layer = c.field("time_every_layer").asBool();
  job.out = c.field("out").asString();
  return job;
}

ProfileOutcome runProfileJob(ProfileJob a, const ProfileProgressFn& progress) {
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
  profiler::optimizerStateBytes(a.options.optimizer, 0);  // known optimizer?
  const int64_t code_before = util::residentFileBytes();
  models::Model model = runtime::openModel(a.model, a.model_config, 0, a.model_file, a.data);
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
  int timed_first = 0, timed = 0;
  for (int64_t b : a.batches) {
    batch = b;
    next = 0;
    a.options.progress = [&](const profiler::ProfileProgress& p) {
      timed = p.timed;
      if (progress) progress(p, b);
    };
    profiles.push_back(profiler::profileModel(model, b, a.options));
    if (profiles.size() > 1) continue;
    timed_first = timed;
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
  ProfileOutcome outcome;
  if (device.is_cpu() && a.options.shares == 1 && threads > 1)
    outcome.speedup = profiler::threadSpeedup(model, a.batches[0], a.options.precision);
  g.setProfiledAs({threads, a.options.shares, profiles[0].profiledAs().probe_seconds, outcome.speedup.speedup});
  json_io::writeFile(a.out, g.toJson());
  outcome.graph = std::move(g);
  outcome.timed_passes = timed_first;
  outcome.share = a.options.share;
  outcome.shares = a.options.shares;
  return outcome;
}


}  // namespace pipetrain::job
