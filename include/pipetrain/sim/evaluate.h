// From a plan to numbers: build the Program, validate it, simulate it, and report the
// metrics users compare (iteration time, throughput, bubbles, memory per rank).
//
// Iteration time is the steady-state time per mini-batch, one definition for `plan`,
// `simulate` and the runtime's prediction: the plan is simulated for 1 and for 5
// mini-batches and the difference divided by 4. For flushing schedules that is one
// flushed mini-batch; for asynchronous ones it leaves out the one-time fill and drain,
// which is what their users pay per mini-batch in a long run, and averages the
// mini-batch-to-mini-batch swing of their stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/schedule/program.h"
#include "pipetrain/sim/cost_model.h"
#include "pipetrain/trace/timeline.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::sim {

struct RankReport {
  std::string device;
  double busy_seconds = 0;       // compute per mini-batch
  double bubble_fraction = 0;    // idle share of the iteration
  double peak_activations = 0;   // micro-batches
  int weight_versions = 0;
  int64_t peak_memory_bytes = 0; // activations + weights x versions + gradients + optimizer
  int64_t memory_capacity_bytes = 0;
};

struct Report {
  std::string schedule;
  int stages = 0;
  int microbatches = 0;
  int64_t samples_per_minibatch = 0;
  double iteration_time = 0;     // seconds per mini-batch
  double throughput = 0;         // samples per second
  double bubble_fraction = 0;    // mean over ranks
  double makespan = 0;           // of the simulated Program
  std::vector<RankReport> ranks;

  int64_t peakMemoryBytes() const;  // the largest rank's
  json_io::Json toJson() const;
};

struct Evaluation {
  schedule::Program program;     // for K mini-batches
  trace::Timeline timeline;
  Report report;
};

// `minibatches` sets only the Program and timeline returned (the trace); the report is
// the same for every value. REQUIRES: plan::validate(plan, graph, cluster) passed.
// Throws Error if the schedule cannot use the plan's numbers.
Evaluation evaluatePlan(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                        const plan::Plan& plan, int minibatches = 1);

// For a given Program (a user's CSV schedule): iteration time = makespan / mini-batches.
Evaluation evaluateProgram(schedule::Program program, const CostModel& costs);

// The synthetic scenario behind `--uniform F,B[,W]`: p ranks (times `chunks` stages),
// every rank's micro-batch costs `forward` and `backward` seconds (`weight` of which is
// the weight-gradient part), communication is free and memory unlimited.
struct UniformScenario {
  graph::LayerGraph graph;
  cluster::ClusterSpec cluster;
  plan::Plan plan;
};
UniformScenario uniformScenario(const plan::ScheduleOptions& schedule, int ranks, int microbatches,
                                double forward, double backward, double weight);

}  // namespace pipetrain::sim
