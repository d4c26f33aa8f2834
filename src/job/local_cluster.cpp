#include "pipetrain/job/local_cluster.h"

#include "pipetrain/torch/wire_choice.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

// This machine's prices for its local ranks, each measured here: what was run, when, and
// what it gave are in docs/predictions.md, "The local cluster's prices".
constexpr double kLoopbackBandwidth = 3.4e9;             // Gloo point to point over loopback
constexpr double kLoopbackAllreduceBandwidth = 0.6e9;    // Gloo's all-reduce: ring traffic, summed on the cores
constexpr double kLoopbackAllreduceHostBandwidth = 0.8e9;  // the all-reduce's CPU work per byte of ring traffic
constexpr double kLoopbackLatency = 50e-6;
constexpr double kLoopbackAllreduceLatency = 0.55e-3;    // a step of the ring (two for 2 ranks)
constexpr cluster::HostCost kLoopbackHostCost{35e-6, 11e9};  // each message's CPU time at both ends
constexpr double kShmAllreduceBandwidth = 6.0e9;             // sums in shared memory (runtime::makeShmChannel)
// A step of the ring (two for 2 ranks), as runs pay it: the byo example's whole sum of
// 38 KiB took 11-29 us in six runs (bench/meeting_wait.py), waits included, where
// `profile-network --wire shm` fits 15-57 us a step to sums timed alone.
constexpr double kShmAllreduceLatency = 5e-6;
// The runtime's own time around an action on a CPU rank: a fixed part and a share of the
// compute action just ended (measured 2026-12-06: the mlp alone at 9.6, 12.9 and 21.2 us
// an action whose compute averaged 0.66, 1.76 and 4.8 ms; the byo example's 5 us).
// Runs of a model replace both with what they measured (graph::LearnedActionOverhead).
constexpr double kActionOverhead = 8e-6;
constexpr double kActionOverheadShare = 0.0025;
// How much a CPU rank's compute between two all-reduces wanders, step to step (the
// standard deviation, as a share of it), where each rank has a core of its own: its
// replicas wait for the last of them at each all-reduce. Measured 2026-12-06 as what
// data-parallel runs' all-reduces took beyond their price, given their own action times:
// 2.3% of a mini-batch's compute in the median of 10 runs of the byo example, the mlp,
// fmnist-cnn and gpt at several batches (bench/meeting_wait.py); the prediction bench's
// 37 data-parallel first runs ran 1.9% slower than the simulator from their own action
// times. The expected wait of 2 replicas is 0.56 standard deviations (docs/predictions.md,
// "Replicas wait for the last to arrive"). Ranks taking turns on the cores are priced by
// the turns instead.
constexpr double kComputeJitter = 0.04;
constexpr double kGpuActionOverhead = 100e-6;  // the same on a GPU rank (a lent H200)
// A GPU's copies to and from pinned host memory: PCIe 5 x16's practical rate, until
// `profile-network --device cuda`'s measurement feeds the local cluster.
constexpr double kGpuHostLinkBandwidth = 25e9;

}  // namespace

LocalSums localSums(const std::string& wire, bool gpus) {
  return runtime::sumsInSharedMemory(wire, !gpus, /*one_host=*/true) ? LocalSums::kSharedMemory : LocalSums::kGloo;
}

cluster::ClusterSpec localCluster(const std::vector<std::string>& device_names, int64_t memory_bytes,
                                  int concurrent_ranks, LocalSums sums, bool gpus,
                                  const std::vector<double>& action_overheads) {
  if (!action_overheads.empty() && action_overheads.size() != device_names.size())
    throw Error("internal: " + std::to_string(action_overheads.size()) + " action overheads for " +
                std::to_string(device_names.size()) + " local devices");
  std::vector<cluster::Device> devices;
  for (std::size_t i = 0; i < device_names.size(); ++i) {
    cluster::Device& d = devices.emplace_back();
    d.name = device_names[i];
    d.kind = gpus ? "gpu" : "cpu";
    d.memory_bytes = memory_bytes;
    if (gpus) d.host_link_bandwidth = kGpuHostLinkBandwidth;
    d.action_overhead = !action_overheads.empty() ? action_overheads[i] : gpus ? kGpuActionOverhead : kActionOverhead;
    d.action_overhead_share = action_overheads.empty() && !gpus ? kActionOverheadShare : 0.0;
    d.compute_jitter = !gpus && static_cast<int>(device_names.size()) <= concurrent_ranks ? kComputeJitter : 0.0;
  }
  const int n = static_cast<int>(devices.size());
  std::vector<cluster::SharedCores> shared;
  if (n > concurrent_ranks) shared.push_back({device_names, concurrent_ranks});
  cluster::Level loopback{"loopback", n, kLoopbackBandwidth, kLoopbackLatency, kLoopbackHostCost};
  const bool shm = sums == LocalSums::kSharedMemory;
  loopback.allreduce_bandwidth = shm ? kShmAllreduceBandwidth : kLoopbackAllreduceBandwidth;
  loopback.allreduce_host_bandwidth = shm ? kShmAllreduceBandwidth : kLoopbackAllreduceHostBandwidth;
  loopback.allreduce_latency = shm ? kShmAllreduceLatency : kLoopbackAllreduceLatency;
  loopback.through_host = gpus;
  return cluster::ClusterSpec(std::move(devices), {loopback}, {}, "this machine's ranks", std::move(shared));
}

cluster::ClusterSpec clusterOfHosts(const cluster::ClusterSpec& measured, int64_t memory_bytes,
                                    const std::map<std::string, double>& action_overheads) {
  std::vector<cluster::Device> devices = measured.devices();
  for (cluster::Device& d : devices) {
    if (memory_bytes > 0) d.memory_bytes = memory_bytes;
    const auto run = action_overheads.find(d.name);
    d.action_overhead = run != action_overheads.end() ? run->second
                        : d.kind == "cpu"             ? kActionOverhead
                                                      : kGpuActionOverhead;
    d.action_overhead_share = run == action_overheads.end() && d.kind == "cpu" ? kActionOverheadShare : 0.0;
  }
  return cluster::ClusterSpec(std::move(devices), measured.levels(), measured.links(), "the job's hosts",
                              measured.sharedCores());
}

cluster::ClusterSpec localCluster(int ranks, int64_t memory_bytes, int concurrent_ranks, LocalSums sums, bool gpus,
                                  double action_overhead) {
  std::vector<std::string> names;
  for (int r = 0; r < ranks; ++r) names.push_back("dev" + std::to_string(r));
  const std::vector<double> overheads =
      action_overhead >= 0 ? std::vector<double>(names.size(), action_overhead) : std::vector<double>();
  return localCluster(names, memory_bytes, concurrent_ranks, sums, gpus, overheads);
}

}  // namespace pipetrain::job
