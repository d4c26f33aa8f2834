// The profiler: measures what the planner and the simulator need to know about a model
// and a cluster, on the machine at hand.
//
//  - profileModel() runs every layer of a model at a given batch size and returns a
//    LayerGraph: forward, input-gradient (I) and weight-gradient (W) seconds (means
//    of several timed passes over the model in a training step's order, after
//    warm-up), output, saved-activation, parameter and
//    optimizer-state bytes, one optimizer step's time, and the allocator's measured peak
//    per layer. With ProfileOptions::shares, only one share of the layers is timed (the
//    rest are sized but not timed), as one of several processes profiling at once.
//  - profileNetwork() measures latency and bandwidth between ranks over a Transport;
//    clusterFromNetwork() turns that into a ClusterSpec.
//
// What is measured and how, and what is not measured on CPU: docs/profiling.md.
// Not thread-safe: profileModel() briefly changes LibTorch's intra-op thread count
// (memory pass) and must not run while other threads use the same model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/precision.h"
#include "pipetrain/torch/transport.h"

namespace pipetrain::profiler {

// ===== Layers ==========================================================================

// Profiles taken at once, one process per rank (ProfileOptions::shares > 1), time
// together: each waits for the others before its first timed pass and keeps running
// untimed passes until the others have timed theirs, so that every timed pass runs
// beside the others' work, as a rank's steps run beside the other ranks'. Without it, a
// share that settled early or finished first was timed partly alone.
class ProfileRendezvous {
 public:
  virtual ~ProfileRendezvous() = default;
  virtual void readyToTime() = 0;  // returns once every profile is ready; throws Error after a time-out
  virtual void doneTiming() = 0;
  virtual bool othersTiming() = 0;  // throws Error after a time-out
};

// Where a profile stands, after each pass over the model (ProfileOptions::progress).
struct ProfileProgress {
  bool timing = false;             // false: still warming up (untimed passes)
  int passes = 0;                  // passes so far, warm-up included (a pass: one step's forward and backward passes of both kinds)
  int timed = 0;                   // of them timed
  int repeats = 0;                 // timed passes at most
  double elapsed_seconds = 0;
  double seconds_left = 0;         // at most, at the mean pass so far
};

struct ProfileOptions {
  int warmup = 2;                  // untimed passes over the model first; more until one touches no new memory page
  int repeats = 5;                 // timed passes at most; each layer's mean is reported
  std::string optimizer = "adam";  // adam or sgd (momentum): its state per parameter and step time
  // Times only share `share` of `shares` (plan::profileShares), as one of `shares`
  // profiles that run at once, one per rank: a profile that holds the whole model streams
  // a working set the size of the model through the caches, where a pipeline's rank holds
  // only its stage's (docs/profiling.md, "Profiled as a rank runs"). The other layers' times
  // are left at 0; their sizes and memory are measured all the same.
  // plan::mergeProfileShares() joins the shares' graphs.
  int share = 0;
  int shares = 1;
  // Micro-batches whose activations each timed pass holds at once between their forward
  // and backward passes, as a pipeline rank holds several (profile_model.cpp, NOTE(in-flight)).
  int in_flight = 1;
  ProfileRendezvous* rendezvous = nullptr;  // with shares: the other shares' processes
  // Loads one batch of training data, as the first stage loads its micro-batch inside
  // every forward pass. When set, it is timed `repeats` times and the mean is added to
  // the forward time of the first layer that reads the model input, if this share times
  // that layer (profile_model.cpp, NOTE(input-loading)). Unset: nothing is loaded.
  std::function<void()> load_batch = nullptr;
  // With min_repeats > 0, timing stops after min_repeats passes once the timed passes'
  // totals lie within `spread` of their median (NOTE(repeats) in profile_model.cpp).
  int min_repeats = 0;
  double spread = 0.03;
  std::function<void(const ProfileProgress&)> progress = nullptr;  // called after every pass
  // A layer identical to an earlier one of its share (module, parameters, inputs,
  // output) takes its times instead of being timed (NOTE(identical-layers)).
  bool time_identical_once = true;
  // bf16: every forward pass under autocast, as training at that precision runs it, so
  // that times, activations and messages are bf16's (runtime::AutocastScope).
  runtime::Precision precision = runtime::Precision::kFp32;
};

// Profiles every layer of `model` on one batch of `batch` samples, in training mode, on
// the device of the model's parameters. The model input is random, from a generator of
// the profile's own with a fixed seed (the global generator is not touched); each layer
// runs on its real inputs, its producers' outputs on that batch, merged as the layer
// merges them (the merge is timed with the layer).
// Returns a LayerGraph with batch_size = batch, one node per model layer, named and
// kinded as the model's layers, with the model's edges (models::graphInputs).
// Leaves the model as it was: each layer's train/eval mode, its buffers (batch-norm
// running statistics) and its parameters' gradients (gradients are taken with
// torch::autograd::grad and never accumulated into .grad).
// Throws Error for batch < 1, warmup < 0, repeats < 1, in_flight < 1, an unknown
// optimizer, a share outside [0, shares), or a model that fails models::checkWiring.
graph::LayerGraph profileModel(const models::Model& model, int64_t batch, const ProfileOptions& options = {});

// Seconds of one forward and backward pass of the whole model on a batch of `batch`
// (random input, as profileModel's) at `precision` on `threads` intra-op threads (0: as they are),
// after one untimed: what a profile's pass will cost, for choosing its sizes before
// profiling. Leaves the model and the thread count as they were.
double stepSeconds(const models::Model& model, int64_t batch, int threads = 0,
                   runtime::Precision precision = runtime::Precision::kFp32);

// What each of `shares` profiling processes times of a model (ProfileOptions::share,
// time_identical_once), for pricing a profile before it is taken: the forward seconds at
// `batch` of the layers it times itself, over the whole model's, and those layers'
// trainable parameters, whose optimizer step every pass times. A share split by
// parameters can hold nearly all of a model's compute (a CNN's convolutions beside a
// classifier's weights), and a share of identical blocks times one of them. Leaves the
// model and the thread count as they were.
struct ShareWork {
  double forward_fraction = 0;
  int64_t stepped_parameters = 0;
};
std::vector<ShareWork> shareWork(const models::Model& model, int64_t batch, int shares, int threads = 0,
                                 runtime::Precision precision = runtime::Precision::kFp32);

// Seconds of `optimizer`'s step per trainable parameter on `threads` threads (0: as they
// are), as a profile's pass steps a layer (the step, then the gradients cleared), timed on
// a parameter too large for the caches. Leaves the thread count as it was.
double optimizerSecondsPerParameter(const std::string& optimizer, int threads = 0);

// ===== Threads =========================================================================

// The BLAS threads this process computes on (OpenBLAS's count; 0 when LibTorch loaded
// another BLAS).
int blasThreads();

// The threads this process computes on: the more of LibTorch's pool's and BLAS's (what a
// profile records as ProfiledAs::threads, and a rank as cluster::Device::threads).
int computeThreads();

// The threads of a rank that `train --nproc` gives `threads` cores (job/launcher.cpp): BLAS
// gets them and LibTorch's intra-op pool one, so profiled costs match the ranks' own.
// Without OpenBLAS, LibTorch's pool gets them.
void useThreadsOfARank(int threads);

// How many times faster a training step of the whole model (as stepSeconds) runs on the
// threads this process has than on one: the median of the ratios of rounds that time
// the two one after the other (NOTE(thread-speedup)). Leaves the threads as they were.
struct ThreadSpeedup {
  double speedup = 0;
  int rounds = 0;
};
ThreadSpeedup threadSpeedup(const models::Model& model, int64_t batch, runtime::Precision precision);

// Optimizer state bytes for `param_bytes` of parameters: "adam" 2x, "sgd" 1x (momentum).
// Throws Error naming the known optimizers otherwise.
int64_t optimizerStateBytes(const std::string& optimizer, int64_t param_bytes);

// ===== Network =========================================================================

struct NetworkOptions {
  std::vector<int64_t> sizes = {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20};  // bytes
  int64_t latency_bytes = 4;       // the small message of the ping-pong
  int warmup = 2;                  // untimed round trips per measurement first ...
  double warmup_seconds = 0.2;     // ... and for the latency, for at least this long
  int repeats = 10;                // timed round trips per measurement; the median is used
};

// Where a rank runs.
struct RankHost {
  std::string host;                // gethostname()
  int local_rank = 0;              // LOCAL_RANK, the rank's index on its host
  int64_t physical_memory_bytes = 0;  // the whole machine's (sysconf)
  // A rank on a GPU: its memory, and the rate of a copy between it and pinned host
  // memory (the slower direction); 0 on a CPU.
  int64_t gpu_memory_bytes = 0;
  double host_link_bandwidth = 0;
  int threads = 0;  // a CPU rank's computeThreads() (cluster::Device::threads)
  // The address this rank reaches the job's master from ("" where not known): names the
  // rank's device where hosts share a name (network namespaces of one machine).
  std::string address;
  // A hash of runtime::hostIdentity(): ranks are on one host when theirs agree; 0 = not
  // known (then the host name decides).
  int64_t host_id = 0;
};

// This process's RankHost with the given local rank, computing on `device`: on a GPU,
// the link to the host is timed with copies of `link_bytes` (the median of `repeats`).
// `job`: the rendezvous whose master `address` is the way out to.
RankHost thisHost(int local_rank, const runtime::Rendezvous& job, const torch::Device& device = torch::kCPU,
                  int64_t link_bytes = 16 << 20, int repeats = 10);

// One rank against another: rank 0 against each other rank, and between hosts rank 0 is
// not on, the first rank of one against the first of the other.
struct PairMeasurement {
  int peer = 0;
  double latency_seconds = 0;      // half the median round trip of a small message
  std::vector<double> bandwidth;   // bytes/s per NetworkOptions::sizes entry
  // Host CPU time a message costs each side (both processes' threads, the transport's
  // own included): a small message's, and per NetworkOptions::sizes entry, one of that
  // size's beyond a small one's.
  double overhead_seconds = 0;
  std::vector<double> message_cpu_seconds;
  int from = 0;  // the rank that measured
};

struct NetworkProfile {
  std::vector<RankHost> ranks;     // indexed by rank
  std::vector<int64_t> sizes;      // the bandwidth message sizes
  // Rank 0 against ranks 1 .. world-1, in order; then, for every two hosts rank 0 is on
  // neither of, their first ranks (a slow link between any two hosts shows).
  std::vector<PairMeasurement> pairs;
  // All ranks' all-reduce (sum) of `allreduce_bytes` as rank 0 timed it, the median of
  // the repeats; 0 = not measured. Gloo on CPU hosts sums on the cores, and its
  // all-reduce can run far below the messages' bandwidth (cluster_spec.h).
  double allreduce_seconds = 0;
  // The largest message size at least, grown until the bytes take most of the time
  // (profileNetwork); 0 = the largest message size (a profile written before).
  int64_t allreduce_bytes = 0;
  double allreduce_cpu_seconds = 0;  // rank 0's process CPU time per all-reduce, all its threads
  double small_allreduce_seconds = 0;  // the mean time of a 64 KiB all-reduce: its fixed cost
};

// Collective: every rank of `transport` calls it with its own RankHost. Rank 0 measures
// against every other rank in turn (the others wait for their turn), then the pairs
// between other hosts are measured one at a time, and rank 0 returns the whole profile;
// the other ranks return a profile holding only `ranks`.
// The all-reduces run on `sums` where given (the data channel a job would sum its
// gradients on: shared memory between a host's CPU ranks), else on `transport`.
// REQUIRES: world size >= 2 (Error otherwise), options.sizes non-empty and positive.
NetworkProfile profileNetwork(runtime::Transport& transport, const RankHost& self,
                              const NetworkOptions& options = {}, runtime::DataChannel* sums = nullptr);

// A ClusterSpec from a profile: one "cpu" device per rank named "<host>-<local rank>"
// (a "gpu" of its GPU's memory and host link where the rank ran on a GPU, every level
// then `through_host`: the profile's messages went over Gloo, through host memory)
// (grouped by host, in order of first appearance, then local rank), speed 1, memory =
// the host's physical memory divided among its ranks. Levels: with every rank on one
// host, one level "host" over all of them; with several hosts holding the same number
// k >= 2 of ranks, "host" (group k, the same-host measurements) and "network" (all, the
// cross-host ones); otherwise one level "network" with the slowest (cross-host)
// figures. A level's bandwidth is the median over its pairs of the bandwidth at the
// largest message size, its latency the median latency. Two hosts whose pairs' median
// bandwidth is off the top level's by more than cluster::kLinkSpread either way are joined by
// explicit links (every device of one to every device of the other) with their own
// figures: BaPipe's heterogeneous links, priced by the planner as measured.
// REQUIRES: a profile from rank 0 (pairs for every other rank).
cluster::ClusterSpec clusterFromNetwork(const NetworkProfile& profile);

}  // namespace pipetrain::profiler
