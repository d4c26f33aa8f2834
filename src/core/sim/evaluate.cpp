#include "pipetrain/sim/evaluate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/program_memory.h"
#include "pipetrain/sim/simulator.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::sim {
namespace {

std::vector<double> busyPerRank(const trace::Timeline& t) {
  std::vector<double> busy;
  for (int r = 0; r < t.numRanks(); ++r) busy.push_back(t.busySeconds(r));
  return busy;
}

// Memory per rank from the Program's accounting priced with the stage sizes.
void fillMemory(Report& report, const schedule::Program& program, const CostModel& costs) {
  std::vector<double> act_bytes;
  for (int s = 0; s < program.num_stages; ++s) act_bytes.push_back(costs.stage(s).activation_bytes);
  const auto footprint = schedule::accountMemory(program, act_bytes);
  const int extra_buffers = plan::extraWeightBuffers(costs.plan().schedule);
  for (int r = 0; r < program.numRanks(); ++r) {
    RankReport& rr = report.ranks[r];
    const cluster::Device& device = costs.cluster().device(costs.deviceOfRank(r));
    rr.device = device.name;
    rr.memory_capacity_bytes = device.memory_bytes;
    rr.peak_activations = footprint[r].peak_activations;
    rr.weight_versions = footprint[r].weight_versions;
    double bytes = footprint[r].peak_activation_bytes;
    for (const auto& st : footprint[r].stages) {
      const StageCosts& c = costs.stage(st.stage);
      // weights x versions, one gradient buffer, optimizer state, the schedule's extra buffers
      bytes += c.param_bytes * (st.weight_versions + 1 + extra_buffers) + c.optimizer_bytes;
    }
    rr.peak_memory_bytes = static_cast<int64_t>(bytes);
  }
}

void finish(Report& report, const std::vector<double>& busy) {
  report.throughput = report.iteration_time > 0 ? report.samples_per_minibatch / report.iteration_time
                                                : std::numeric_limits<double>::infinity();
  double sum = 0;
  for (std::size_t r = 0; r < busy.size(); ++r) {
    RankReport& rr = report.ranks[r];
    rr.busy_seconds = busy[r];
    // max(): a rank busy for the whole iteration can come out a rounding error below zero.
    rr.bubble_fraction = report.iteration_time > 0 ? std::max(0.0, 1.0 - busy[r] / report.iteration_time) : 0.0;
    sum += rr.bubble_fraction;
  }
  report.bubble_fraction = busy.empty() ? 0 : sum / busy.size();
}

Report emptyReport(const schedule::Program& program, const CostModel& costs) {
  Report report;
  report.schedule = program.schedule;
  report.stages = program.num_stages;
  report.microbatches = program.microbatches;
  report.samples_per_minibatch = program.microbatches * costs.plan().microbatch_size;
  report.ranks.resize(program.numRanks());
  return report;
}

}  // namespace

int64_t Report::peakMemoryBytes() const {
  int64_t peak = 0;
  for (const RankReport& r : ranks) peak = std::max(peak, r.peak_memory_bytes);
  return peak;
}

json_io::Json Report::toJson() const {
  json_io::Json ranks_json = json_io::Json::array();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankReport& rr = ranks[r];
    ranks_json.push_back({{"rank", r},
                          {"device", rr.device},
                          {"busy_seconds", rr.busy_seconds},
                          {"bubble_fraction", rr.bubble_fraction},
                          {"peak_activations", rr.peak_activations},
                          {"weight_versions", rr.weight_versions},
                          {"peak_memory_bytes", rr.peak_memory_bytes},
                          {"memory_capacity_bytes", rr.memory_capacity_bytes}});
  }
  return {{"schedule", schedule},
          {"stages", stages},
          {"microbatches", microbatches},
          {"samples_per_minibatch", samples_per_minibatch},
          {"iteration_time", iteration_time},
          {"throughput", throughput},
          {"bubble_fraction", bubble_fraction},
          {"makespan", makespan},
          {"ranks", ranks_json}};
}

// Mini-batches before the steady-state window, and in it.
constexpr int kSteadyFrom = 1;
constexpr int kSteadyWindow = 4;

Evaluation evaluatePlan(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                        const plan::Plan& plan, int minibatches) {
  if (minibatches < 1) throw Error("mini-batches to simulate must be at least 1");
  const CostModel costs(graph, cluster, plan);
  // The steady state: the mean mini-batch of a window after the first, so it is one
  // figure whatever trace was asked for (a single K+1 - K difference swung by 8% with K
  // under pipedream).
  const schedule::Program first = plan::programForPlan(plan, costs.dag(), kSteadyFrom);
  const schedule::Program window = plan::programForPlan(plan, costs.dag(), kSteadyFrom + kSteadyWindow);
  const trace::Timeline first_timeline = simulate(first, costs), window_timeline = simulate(window, costs);

  Evaluation e;
  if (minibatches == kSteadyFrom) {
    e.program = first;
    e.timeline = first_timeline;
  } else if (minibatches == kSteadyFrom + kSteadyWindow) {
    e.program = window;
    e.timeline = window_timeline;
  } else {
    e.program = plan::programForPlan(plan, costs.dag(), minibatches);
    e.timeline = simulate(e.program, costs);
  }
  e.timeline.title = plan.schedule.name + ", " + std::to_string(plan.numStages()) + " stages, " +
                     std::to_string(plan.microbatches) + " micro-batches";
  e.report = emptyReport(e.program, costs);
  e.report.makespan = e.timeline.makespan();
  e.report.iteration_time = (window_timeline.makespan() - first_timeline.makespan()) / kSteadyWindow;
  std::vector<double> busy = busyPerRank(window_timeline), busy_first = busyPerRank(first_timeline);
  for (std::size_t r = 0; r < busy.size(); ++r) busy[r] = (busy[r] - busy_first[r]) / kSteadyWindow;
  fillMemory(e.report, window, costs);
  finish(e.report, busy);
  return e;
}

Evaluation evaluateProgram(schedule::Program program, const CostModel& costs) {
  schedule::validate(program);
  Evaluation e;
  e.program = std::move(program);
  e.timeline = simulate(e.program, costs);
  e.timeline.title = e.program.schedule + ", " + std::to_string(e.program.num_stages) + " stages, " +
                     std::to_string(e.program.microbatches) + " micro-batches";
  e.report = emptyReport(e.program, costs);
  e.report.makespan = e.timeline.makespan();
  e.report.iteration_time = e.report.makespan / e.program.minibatches;
  std::vector<double> busy = busyPerRank(e.timeline);
  for (double& b : busy) b /= e.program.minibatches;
  fillMemory(e.report, e.program, costs);
  finish(e.report, busy);
  return e;
}

UniformScenario uniformScenario(const plan::ScheduleOptions& schedule, int ranks, int microbatches,
                                double forward, double backward, double weight) {
  if (ranks < 1) throw Error("--stages must be at least 1");
  if (!(forward >= 0 && backward >= 0 && weight >= 0 && weight <= backward))  // NaN fails too
    throw Error("--uniform F,B[,W]: times must be non-negative and W (the weight-gradient part of B) at most B");
  if (!std::isfinite(forward) || !std::isfinite(backward) || !std::isfinite(weight) ||
      std::max({forward, backward, weight}) > limits::kMaxSeconds)
    throw Error("--uniform F,B[,W]: times must be finite and at most " + std::to_string(limits::kMaxSeconds) + " s");
  if (schedule.chunks < 1 || schedule.chunks > limits::kMaxStages)
    throw Error("--chunks must be between 1 and " + std::to_string(limits::kMaxStages));
  const schedule::ScheduleTraits& t = schedule::traits(schedule.name);
  const int v = schedule::stagesPerRank(t, schedule.chunks);
  limits::checkProgramSize(int64_t{ranks} * v, microbatches, 1, "--uniform");
  const int stages = ranks * v;
  // Each of a rank's v chunks does 1/v of its work, so per-rank totals stay F and B.
  UniformScenario u{graph::LayerGraph::uniformChain(stages, forward / v, (backward - weight) / v, weight / v),
                    cluster::ClusterSpec::uniform(ranks, std::numeric_limits<int64_t>::max(),
                                                  std::numeric_limits<double>::infinity(), 0.0),
                    plan::Plan{}};
  u.plan.microbatch_size = 1;
  u.plan.microbatches = microbatches;
  u.plan.schedule = schedule;
  for (int s = 0; s < stages; ++s)
    u.plan.stages.push_back(
        {{u.graph.layer(s).name}, {u.cluster.device(v > 1 ? schedule::placedRank(t.placement, s, ranks) : s).name}});
  return u;
}

}  // namespace pipetrain::sim
