// What `pipetrain plan` and the Python API's plan() ask: a profiled model on a cluster
// (two files), explored as ExploreOptions say, ranked by an objective that may read a
// calibration file.
#pragma once

#include <memory>
#include <string>

#include "pipetrain/planner/explore.h"

namespace pipetrain::planner {

struct PlanRequest {
  std::string graph, cluster;  // files
  ExploreOptions explore;
  int microbatches = 0;        // > 0: only the micro-batch size that makes this many
  std::string calibration;     // the update rules' calibration file, for objectives that need one
};

struct PlannedFromFiles {
  graph::LayerGraph graph;
  cluster::ClusterSpec cluster;  // fitted to the profile's devices
  std::string note;              // how it was fitted, where it was
  Exploration exploration;
};

// Throws Error on files that do not load, on options that do not go together, and where
// no plan fits.
PlannedFromFiles planFromFiles(PlanRequest request);

}  // namespace pipetrain::planner
