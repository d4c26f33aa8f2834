// This machine's ranks as the planner and the simulator see them: CPU devices (or GPUs)
// sharing loopback Gloo and, where ranks outnumber them, the cores (or the GPUs).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"

namespace pipetrain::job {

// What sums this machine's ranks' gradients: Gloo over loopback, or shared memory
// (runtime::makeShmChannel). Each all-reduces at its own measured rates.
enum class LocalSums { kGloo, kSharedMemory };

// What a job's `--wire` sums with on this machine (runtime::sumsInSharedMemory, the
// rule runtime::openDataChannel follows): shared memory for "shm" or "auto" between CPU
// ranks; Gloo otherwise.
LocalSums localSums(const std::string& wire, bool gpus);

// This machine's ranks as a cluster: CPU devices with these names that share loopback
// Gloo (bandwidth and latency as measured on these machines, docs/runtime.md), their
// all-reduces summed by `sums`, each with `memory_bytes`. `concurrent_ranks`: how many
// ranks the cores run at once at full speed (cores / each rank's threads); more ranks
// than that share the cores. `gpus`: the ranks compute on GPUs instead (kind "gpu",
// `memory_bytes` each rank's share of its GPU's), and their messages and reductions go
// through pinned host memory over loopback Gloo (through_host, at
// kGpuHostLinkBandwidth), as between ranks that share a GPU. `action_overheads`: each
// device's runtime time around an action (cluster::Device::action_overhead), where a run
// measured it; left empty, CPU ranks take this machine's as measured (kActionOverhead
// and kActionOverheadShare of each compute action) and GPU ranks a lent H200's
// (kGpuActionOverhead).
cluster::ClusterSpec localCluster(const std::vector<std::string>& device_names, int64_t memory_bytes,
                                  int concurrent_ranks, LocalSums sums, bool gpus = false,
                                  const std::vector<double>& action_overheads = {});
// The same with `ranks` devices named dev0, dev1, ... (plan::chainPlan's names), each
// with `action_overhead` (>= 0: what runs of the model measured, the profile's
// graph::LearnedActionOverhead; < 0: the constants).
cluster::ClusterSpec localCluster(int ranks, int64_t memory_bytes, int concurrent_ranks, LocalSums sums,
                                  bool gpus = false, double action_overhead = -1);

// The ranks of a job across hosts as the planner sees them: the devices and levels its
// network measurement found (job/host_network.h), each device with `memory_bytes` where
// given (> 0; else its share of its host's memory) and the runtime's own time around an
// action as measured on this machine's CPU ranks, or on a lent GPU for a GPU's; or, for
// a device named in `action_overheads`, the time a run measured there.
cluster::ClusterSpec clusterOfHosts(const cluster::ClusterSpec& measured, int64_t memory_bytes,
                                    const std::map<std::string, double>& action_overheads = {});

}  // namespace pipetrain::job
