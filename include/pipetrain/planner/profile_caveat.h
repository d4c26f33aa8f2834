// Whether a profile prices the cluster it is planned for as `train`'s ranks would run:
// one process timing the whole model on several threads is faster per layer than a rank
// that computes its stage on its share of the cores (docs/profiling.md, "Profiled as a
// rank runs"); a plan for several CPU ranks from such a profile predicts too much.
#pragma once

#include <string>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"

namespace pipetrain::planner {

// A note saying so and what to do instead, or "" where the profile was taken as ranks
// run, does not say how it was taken, or the cluster has fewer than two CPU devices.
std::string profileCaveat(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster);

}  // namespace pipetrain::planner
