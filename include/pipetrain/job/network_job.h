// `pipetrain profile-network` as a job: latency, bandwidth and the all-reduce between
// ranks over the real transport, written as a cluster spec (docs/profiling.md). Like
// `train`: a launcher starts local ranks of the same command; each rank (RANK set, as
// torchrun sets it) measures, and rank 0 hands the cluster back. src/cli parses and prints.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/torch/profiler.h"

namespace pipetrain::job {

struct NetworkJob {
  int nproc = 2;                    // local ranks the launcher starts
  profiler::NetworkOptions options;  // message sizes and repeats
  int timeout_seconds = 60;         // a silent peer ends the job
  std::string device = "cpu";       // where the ranks compute (runtime::rankDevice)
  std::string wire = "auto";        // what the all-reduces run on: auto, gloo, shm
  std::string out;                  // the cluster JSON written
  std::vector<std::string> argv;    // the command the launcher starts its ranks with
};

// What rank 0 measured; the other ranks return nothing.
struct NetworkMeasured {
  profiler::NetworkProfile profile;
  cluster::ClusterSpec cluster;
  std::string sums_on;  // the channel the all-reduces ran on
};

// One rank: measures with the others; rank 0 returns what was measured.
std::optional<NetworkMeasured> measureNetworkRank(const NetworkJob& job);

// Rank 0's result where it goes: to the launcher (a RESULT line) when launched, else
// written to `job.out`. Returns the path written, or "" when handed on.
std::string deliverNetworkResult(const NetworkJob& job, const NetworkMeasured& measured);

// The launcher: `job.nproc` local ranks of `job.argv`, each of rank 0's lines to `line`;
// writes rank 0's cluster to `job.out` and returns it.
cluster::ClusterSpec launchNetworkJob(const NetworkJob& job, const std::function<void(const std::string&)>& line);

}  // namespace pipetrain::job
