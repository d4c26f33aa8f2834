// What `pipetrain simulate` and the Python API's simulate() ask: a plan on a profiled
// model and cluster (three files), or a schedule at equal stage costs; loaded, checked
// against each other, and evaluated.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/sim/evaluate.h"
#include "pipetrain/util/option_table.h"

namespace pipetrain::sim {

struct SimulationRequest {
  std::string graph, cluster, plan;  // files: all three, or none with `uniform`
  plan::ScheduleOptions schedule;    // with `uniform`
  int stages = 0;
  int microbatches = 8;
  std::vector<double> uniform;       // every stage's F,B[,W] seconds, messages free
  int minibatches = 1;               // in the simulated program
  double overlap_factor = 0;         // 0 = the profile's
  std::string csv;                   // a per-rank CSV program instead of the schedule's
};

struct SimulatedPlan {
  graph::LayerGraph graph;
  cluster::ClusterSpec cluster;
  plan::Plan plan;
  std::string origin;  // the plan file, or "--uniform"
  std::string note;    // how the profile was fitted to the cluster's devices, where it was
  Evaluation evaluation;
};

// The request's options, declared once (util/option_table.h): `simulate`'s flags and the
// Python API's keywords.
std::vector<options::Option> simulationOptions(SimulationRequest& request);

// Throws Error on files that do not load or fit together, and on a plan whose peak
// memory exceeds a device (which rank, and by how much).
SimulatedPlan simulate(const SimulationRequest& request);

}  // namespace pipetrain::sim
