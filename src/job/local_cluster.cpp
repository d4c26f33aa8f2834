#include "pipetrain/job/local_cluster.h"

#include "pipetrain/torch/wire_choice.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

// Gloo over loopback on these machines, two rates. Point to point it moves 3.3-6 GB/s
// (`pipetrain profile-network --nproc 2`, 2026-11-26: 6.1, 6.9, 6.0, 3.3, 3.4 GB/s at
// 128 KiB, 512 KiB, 1, 4, 16 MiB) after ~50 us; its all-reduce of a 32 MiB stage took
// 56 ms, 0.6 GB/s of ring traffic: it sums on the cores that also train. Priced at the
// all-reduce's rate, as they were until 2026-11-26, fmnist-cnn's 0.4-0.8 MB activations
// cost 1.7 ms each on the critical path, and its prediction from measured stages came
// out 4-10% slow; each rate now prices its own traffic (cluster_spec.h).
constexpr double kLoopbackBandwidth = 3.4e9;
constexpr double kLoopbackAllreduceBandwidth = 0.6e9;
// And the all-reduce is CPU work: rank 0's process CPU in it was 80-84% of its time
// (`pipetrain profile-network --sizes 1M,16M`, 2026-11-26: 18.9 ms of 23.3, 23.3 of 29.0;
// 32M: 36.6 of 42.1), 0.72-0.92 GB/s of ring traffic through each rank's CPU.
constexpr double kLoopbackAllreduceHostBandwidth = 0.8e9;
constexpr double kLoopbackLatency = 50e-6;
// But a step of the all-reduce's ring costs ~10x that: a data-parallel run of the byo
// example (38 KB of gradients, 2 ranks) waited 1.21-1.25 ms in each ALLREDUCE (the
// bucket starts as the backward pass ends), predicted 0.16 ms at the latency above, and
// measured 17-19k samples/s against 44-48k predicted from its own action times. Alone,
// `torch.distributed` Gloo all-reduces of 4 B to 1 MiB between two processes here took
// medians of 0.28-1.3 ms with a tenth of them 3.6-5.8 ms (a scheduler tick waiting for a
// core: both ends' I/O threads must run; bench/allreduce_cost.py: means of 2.0-2.4 ms
// for 1-256 KiB in a later hour, docs/profiling.md#the-all-reduce). Priced at the run's
// own 1.2 ms: 2 steps of 0.55 ms.
constexpr double kLoopbackAllreduceLatency = 0.55e-3;
// And each message costs both processes CPU time they do not train in: Gloo's call and
// its I/O thread, and the kernel copying the bytes through the socket. `pipetrain
// profile-network`: 28-46 us per message (runs on several days) and, on top, 9, 41,
// 100, 363 us for 128 KiB, 512 KiB, 1 MiB, 4 MiB: 11-15 GB/s while the bytes stay in the
// caches, which activations of a micro-batch do here (mlp 128 KiB, fmnist-cnn 0.4-0.8
// MB). A 16 MiB message took 3.5 ms, 4.8 GB/s: underpriced 2x by this rate.
constexpr cluster::HostCost kLoopbackHostCost{35e-6, 11e9};

// Sums in shared memory (runtime::makeShmChannel), 2 ranks: `pipetrain profile-network
// --nproc 2 --wire shm --sizes 1M,4M,16M --repeats 20`, 4 runs on 2026-11-30: 16 MiB in
// 4.8-14.1 ms (3 of 4 runs 4.8-5.4 ms), of which rank 0's CPU 4.7-6.4 ms: the sum is
// all CPU work, copies and adds, so its traffic goes at one rate, 3.2-3.6 GB/s in the
// three steady runs (1.2 in the other); a 64 KiB sum took 0.09-0.11 ms on average (0.24
// in that run): ~50 us a step of the ring's two, its two barriers on the futex. Gloo's,
// alternated with them: 4 MiB in 3.3 and 5.4 ms, 64 KiB in 1.7 and 2.6 ms. With the
// barrier's spins cut to 100 (3 runs): 16 MiB in 4.3-5.2 ms, 64 KiB in 0.041-0.056 ms.
constexpr double kShmAllreduceBandwidth = 3.2e9;
constexpr double kShmAllreduceLatency = 50e-6;

// The runtime's own time around each action of a CPU rank, beyond its sends' host cost
// (cluster::Device::action_overhead): posting receives, retiring weight versions, timing
// the action, reporting a mini-batch and probing the core. Measured per action as a
// run's time neither computing, waiting nor all-reducing (the summary's
// framework_seconds_per_action, 2026-12-01): 29-66 us on the ranks of pipelines (gpt
// ZB-V on 2 ranks 40-66, the mlp's ZB-H2 on 3 ranks 29-55), of which the sends' priced
// host cost is about 11 us in ZB-V's 42 actions a mini-batch; 43-156 us in data
// parallelism (gpt 104-138), whose 4 actions a mini-batch share the per-mini-batch costs.
constexpr double kActionOverhead = 30e-6;

// The same on a GPU rank: the device's idle time between the actions the host queues
// (wall time less the actions' CUDA-event spans), per action. On a lent H200
// (2026-12-04, scripts/device_check.sh, docs/gpu.md): 79-119 us on one stage of the 86M
// gpt at batch 8 (5 runs), 174 us on the 1.21B gpt's one stage at 16. Ranks sharing a GPU
// read nothing useful here (each one's event spans hold the other's kernels).
constexpr double kGpuActionOverhead = 100e-6;

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

cluster::ClusterSpec clusterOfHosts(const cluster::ClusterSpec& measured, int64_t memory_bytes) {
  std::vector<cluster::Device> devices = measured.devices();
  for (cluster::Device& d : devices) {
    if (memory_bytes > 0) d.memory_bytes = memory_bytes;
    d.action_overhead = d.kind == "cpu" ? kActionOverhead : kGpuActionOverhead;
  }
  return cluster::ClusterSpec(std::move(devices), measured.levels(), measured.links(), "the job's hosts",
                              measured.sharedCores());
}

cluster::ClusterSpec localCluster(int ranks, int64_t memory_bytes, int concurrent_ranks, LocalSums sums, bool gpus) {
  std::vector<std::string> names;
  for (int r = 0; r < ranks; ++r) names.push_back("dev" + std::to_string(r));
  return localCluster(names, memory_bytes, concurrent_ranks, sums, gpus);
}

}  // namespace pipetrain::job
