// What `pipetrain plan` and the Python API's plan() ask: a profiled model on a cluster
// (two files), explored as ExploreOptions say, ranked by an objective that may read a
// calibration file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pipetrain/planner/explore.h"
#include "pipetrain/util/option_table.h"

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

// The request's options, declared once (util/option_table.h): `plan`'s flags and the
// Python API's keywords.
std::vector<options::Option> planOptions(PlanRequest& request);

// Throws Error on files that do not load, on options that do not go together, and where
// no plan fits.
PlannedFromFiles planFromFiles(PlanRequest request);

}  // namespace pipetrain::planner
