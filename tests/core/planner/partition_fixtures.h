// Shared by the partitioners' tests: a two-level cluster and the infinity they bound with.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"

namespace pipetrain::planner::fixtures {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Two nodes of two devices; the second node's devices are slower when `mixed`; messages
// between the nodes cost their hosts time, and go through host memory over each
// device's own link (the second node's slower), when `host_cost`.
inline cluster::ClusterSpec twoLevelCluster(bool mixed, int64_t memory, bool host_cost = false) {
  std::vector<cluster::Device> d;
  for (int i = 0; i < 4; ++i) {
    d.push_back({"d" + std::to_string(i), "gpu", mixed && i >= 2 ? 0.5 : 1.0, memory});
    if (host_cost) d.back().host_link_bandwidth = i >= 2 ? 50000 : 100000;
  }
  const cluster::HostCost host = host_cost ? cluster::HostCost{0.05, 20000} : cluster::HostCost{};
  cluster::Level net{"net", 4, 2000, 0.1, host};
  net.through_host = host_cost;
  return cluster::ClusterSpec(d, {{"node", 2, 20000, 0.01}, net}, {});
}

}  // namespace pipetrain::planner::fixtures
