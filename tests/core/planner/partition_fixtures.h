// Shared by the partitioners' tests: a two-level cluster, random chains and the infinity
// they bound with.
#pragma once

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"

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

// A chain of `layers` layers with random times (0.5-4 s) and sizes (kB).
inline graph::LayerGraph randomChain(std::mt19937& rng, int layers) {
  std::uniform_real_distribution<double> time(0.5, 4.0);
  std::uniform_int_distribution<int64_t> bytes(1, 64);
  std::vector<graph::Layer> v;
  for (int i = 0; i < layers; ++i) {
    graph::Layer l;
    l.name = "l" + std::to_string(i);
    if (i > 0) l.inputs = {v.back().name};
    l.forward_seconds = time(rng);
    l.backward_input_seconds = time(rng);
    l.backward_weight_seconds = time(rng);
    l.optimizer_seconds = time(rng) / 4;
    l.output_bytes = bytes(rng) * 1000;
    l.saved_activation_bytes = bytes(rng) * 100;
    l.param_bytes = bytes(rng) * 1000;
    l.optimizer_state_bytes = 2 * l.param_bytes;
    v.push_back(l);
  }
  return graph::LayerGraph(v, 1);
}

}  // namespace pipetrain::planner::fixtures
