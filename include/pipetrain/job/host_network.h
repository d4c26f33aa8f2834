// The network of a job whose ranks run on several hosts, as its planner sees it. Before
// rank 0 plans such a job, every rank takes part in profile-network's measurement
// (profiler::profileNetwork) over a Gloo group of its own, and the measured levels
// (within a host, between hosts) become the cluster the planner plans for. They are kept
// in the cache folder, keyed by the job's hosts, so the next job on the same hosts plans
// at once (docs/profiling.md#a-job-across-hosts).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/profile_cache.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::job {

// Where one rank of a job runs, as rank 0 learns it before measuring anything.
struct RankPlace {
  std::string identity; // its host's runtime::hostIdentity() (its name first): ranks are on one host when theirs agree
  std::string address;  // the address it reaches the master from (profiler::RankHost::address)
  int local_rank = 0;
  int threads = 0;      // the threads it computes on
  std::string device;   // "cpu" or "cuda"

  json_io::Json toJson() const;
  static RankPlace fromJson(const json_io::Json& j, const std::string& origin);
};

// This process's place in the job `rendezvous` describes, computing on `device` with
// `threads` threads.
RankPlace thisRankPlace(const runtime::Rendezvous& rendezvous, int local_rank, const std::string& device, int threads);

// Whether every rank runs on one host.
bool oneHost(const std::vector<RankPlace>& ranks);

// Refuses ranks not numbered host by host, in local-rank order on each (as torchrun
// numbers them): the measured cluster lists its devices so, and each process runs the
// plan's rank of its device by that order (planRanksOfJobRanks). Ranks started by hand
// may be numbered otherwise; the Error names two ranks out of order.
void checkNumberedHostByHost(const std::vector<RankPlace>& ranks);

// The cache entry's key: every rank's place, in rank order, and what sums the gradients.
// A new network namespace is a new host: a network shaped anew is measured anew.
graph::ProfileKey networkKey(const std::vector<RankPlace>& ranks, const std::string& wire);

// The measured network kept under `key` in the cache folder, or nothing (an entry that
// cannot be read, or was taken under another key, is nothing too).
struct CachedNetwork {
  cluster::ClusterSpec cluster;
  std::string path;
};
std::optional<CachedNetwork> findNetwork(const graph::ProfileKey& key);
// Keeps it there; returns the file's path ("" where the folder cannot be written).
std::string storeNetwork(const graph::ProfileKey& key, const cluster::ClusterSpec& cluster);

// Collective over the ranks of `rendezvous`: they measure the links between them as
// profile-network does, at message sizes a job can afford to wait for (a few seconds
// over 100 Mb/s), in a Gloo group of their own, summing over `wire` as training will,
// each on its device of `device_spec` (train's --device). Rank 0 returns the measured
// cluster, the others nothing.
std::optional<cluster::ClusterSpec> measureNetwork(const runtime::Rendezvous& rendezvous, const std::string& wire,
                                                   const std::string& device_spec);

// Which rank of `plan` each process of the job runs, by its rank in the job (torchrun's
// RANK): the plan's rank r runs the device plan::rankDeviceNames(plan)[r], and the job's
// rank t is device t of `hosts`, the measured cluster (torchrun numbers ranks host by
// host and local rank by local rank, the order clusterFromNetwork gives the devices).
// So each stage runs on the host it was priced on. Error where the plan names a device
// the hosts lack.
std::vector<int> planRanksOfJobRanks(const plan::Plan& plan, const cluster::ClusterSpec& hosts);

// One line per level and per link of `cluster`: rates and latency, for the console.
std::vector<std::string> describeNetwork(const cluster::ClusterSpec& cluster);

}  // namespace pipetrain::job
