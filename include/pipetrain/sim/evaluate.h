// From a plan to numbers: build the Program, validate it, simulate it, and report the
// metrics users compare (iteration time, throughput, bubbles, memory per rank).
//
// Iteration time is the steady-state time per mini-batch, one definition for `plan`,
// `simulate` and the runtime's prediction: the plan is simulated for 1 and for 5
// mini-batches and the difference divided by 4. For flushing schedules that is one
// flushed mini-batch; for asynchronous ones it leaves out the one-time fill and drain,
// which is what their users pay per mini-batch in a long run, and averages the
// mini-batch-to-mini-batch swing of their stream.
//
// A mini-batch of many micro-batches is not simulated whole where it need not be: past
// the pipeline's start-up transient every further micro-batch per replica adds the same
// time, compute and activations, so the report is extrapolated from two shorter
// mini-batches (m1 and 2 m1, some 2 x stages x replicas) once they show that no
// resource's queue is still growing (a port fed faster than it drains binds later);
// otherwise the mini-batch is simulated whole. The extrapolation agrees with the whole
// simulation to 1e-12 on the periodic schedules of sim_test, and to 2.5e-3 on GPipe,
// whose growth per micro-batch wanders by tenths of a percent however long the
// mini-batch. It made the planner 35x faster on PipeDream's GNMT at 4096 micro-batches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/schedule/program.h"
#include "pipetrain/sim/cost_model.h"
#include "pipetrain/trace/timeline.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::sim {

// Mini-batches in the steady-state window of a whole simulation (see above).
constexpr int kSteadyWindow = 4;

struct RankReport {
  std::string device;
  double busy_seconds = 0;       // compute per mini-batch
  double bubble_fraction = 0;    // idle share of the iteration
  double peak_activations = 0;   // micro-batches
  int weight_versions = 0;
  // activations + weights x versions + gradients + optimizer state, and process_bytes
  int64_t peak_memory_bytes = 0;
  // Of that peak, what the process holds beyond the tensors the accounting prices: the
  // profile's framework working memory and, on a rank that loads data, the dataset
  // (graph::ProcessMemory).
  int64_t process_bytes = 0;
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

// evaluatePlan's report without a trace: what the planner ranks by.
Report predictReport(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const plan::Plan& plan);
// predictReport, or nothing where the plan cannot reach `to_beat` samples/s: a
// mini-batch predictReport would simulate whole (a queue that binds later) is not
// simulated when the line through the two shorter ones, which that queue only slows,
// or its busiest resource already falls short. What the planner's search calls.
std::optional<Report> predictReportAbove(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                                         const plan::Plan& plan, double to_beat);
// The shorter mini-batches (m1, m2 micro-batches) predictReport simulates in place of
// the plan's, or nothing where it simulates the plan as it is (too few to gain from it).
std::optional<std::pair<int, int>> extrapolationPoints(const plan::Plan& plan);
// The report from simulating every micro-batch, which predictReport extrapolates (tests).
Report simulatedReport(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const plan::Plan& plan);

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
