#include "pipetrain/sim/evaluate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include "pipetrain/graph/heap_share.h"
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

// Memory per rank from the Program's accounting priced with the stage sizes. A stage's
// gradients exist from its first backward pass to its step (training clears them), so
// they count only at the peaks they are part of; a replicated stage's live in its
// all-reduce buckets throughout. (Counted throughout, they put the 1.21B gpt's prediction
// on an H200 far above the allocator's peak, which comes at the end of the forward pass,
// before any gradient: docs/gpu.md, "Measured on a lent NVIDIA H200 (2026-11-30)".)
bool gradientsPersist(const CostModel& costs, int stage) { return costs.replicas()[stage] > 1; }

void fillMemory(Report& report, const schedule::Program& program, const CostModel& costs) {
  std::vector<schedule::StageBytes> stage_bytes;
  for (int s = 0; s < program.num_stages; ++s) {
    const StageCosts& c = costs.stage(s);
    schedule::StageBytes& bytes = stage_bytes.emplace_back();
    bytes.activations = c.activation_bytes;
    bytes.split_activations = c.split_activation_bytes;
    bytes.gradients = gradientsPersist(costs, s) ? 0.0 : c.param_bytes;
    bytes.backward_peak = c.backward_peak_bytes;
    bytes.input_backward_peak = c.input_backward_peak_bytes;
    bytes.weight_peak = c.weight_peak_bytes;
  }
  const auto footprint = schedule::accountMemory(program, stage_bytes);
  const int extra_buffers = plan::extraWeightBuffers(costs.plan().schedule);
  for (int r = 0; r < program.numRanks(); ++r) {
    RankReport& rr = report.ranks[r];
    const cluster::Device& device = costs.cluster().device(costs.deviceOfRank(r));
    rr.device = device.name;
    rr.memory_capacity_bytes = device.memory_bytes;
    rr.peak_activations = footprint[r].peak_activations;
    rr.weight_versions = footprint[r].weight_versions;
    double bytes = footprint[r].peak_activation_bytes;
    double recomputing = 0;  // one micro-batch at a time is recomputed on a rank
    const graph::ProcessMemory& process = costs.graph().processMemory();
    bool holds_data = false;
    for (const auto& st : footprint[r].stages) {
      const StageCosts& c = costs.stage(st.stage);
      recomputing = std::max(recomputing, c.recompute_peak_bytes);
      holds_data = holds_data || c.holds_data;
      // weights x versions, optimizer state, the schedule's extra buffers, and gradient
      // buckets where the stage is replicated
      bytes += c.param_bytes * (st.weight_versions + extra_buffers + (gradientsPersist(costs, st.stage) ? 1 : 0)) +
               c.optimizer_bytes;
    }
    const double tensors = bytes + recomputing;
    rr.process_bytes = process.framework_bytes + (holds_data ? process.data_bytes : 0) +
                       static_cast<int64_t>(graph::heapKeptBeside(tensors, device.kind, process.heap));
    rr.peak_memory_bytes = static_cast<int64_t>(tensors) + rr.process_bytes;
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

// Mini-batches before the steady-state window (its length, kSteadyWindow, is in
// evaluate.h). Where a flushing schedule's short mini-batches are extrapolated, those
// after the first take the same time, so the window is one mini-batch there; a whole
// one whose ports queue up does not (measured on PipeDream's GNMT and AlexNet:
// docs/planner.md, "On published profiles: PipeDream's").
constexpr int kSteadyFrom = 1;
// A pipeline's start-up transient lasts about as many micro-batches per replica as it
// has stages (ZB-H2 warm-up about twice that): past this many depths
// the simulated iteration grows by the same time per micro-batch to within 1e-13
// (sim_test Evaluate.ExtrapolatedReportMatchesFullSimulation).
constexpr int kTransientDepths = 2;
constexpr double kSettledTolerance = 1e-9;
// Lines through successive pairs of mini-batches that agree this closely run straight on.
constexpr double kStraightTolerance = 1e-6;
// A synchronous plan whose second mini-batch alone falls this far short of the best is
// not simulated for the steady window: four times the most the window's mean was seen
// to exceed it by (measured: docs/planner.md, "On published profiles: PipeDream's").
constexpr double kFirstMinibatchSpread = 0.025;

// Seconds each resource that work queues on is occupied: every rank's compute, then
// every network port's wire time.
std::vector<double> resourceLoads(const Totals& t) {
  std::vector<double> load = t.busy;
  load.insert(load.end(), t.port_wire.begin(), t.port_wire.end());
  return load;
}

struct Steady {
  Report report;              // without memory until withMemory()
  std::vector<double> loads;  // per mini-batch, as resourceLoads
  schedule::Program window;   // what the memory is accounted on
};

// The steady state of `plan` as simulated: the mean mini-batch of a window after the
// first, so it is one figure whatever trace was asked for (a single K+1 - K difference
// swings with K under pipedream: docs/schedules.md, "Simulated metrics").
// The first mini-batches' Program is checked where `check` says; the window's, the same
// plan at more mini-batches, is not.
Steady steadyState(const plan::Plan& plan, const CostModel& costs, int minibatches_in_window,
                   plan::Check check = plan::Check::kValidate) {
  const Totals first = simulateTotals(plan::programForPlan(plan, costs.dag(), kSteadyFrom, check), costs);
  schedule::Program program =
      plan::programForPlan(plan, costs.dag(), kSteadyFrom + minibatches_in_window, plan::Check::kSkip);
  const Totals window = simulateTotals(program, costs);
  Steady steady{emptyReport(program, costs), resourceLoads(window), std::move(program)};
  Report& report = steady.report;
  report.iteration_time = (window.makespan - first.makespan) / minibatches_in_window;
  const std::vector<double> loads_first = resourceLoads(first);
  for (std::size_t k = 0; k < steady.loads.size(); ++k)
    steady.loads[k] = (steady.loads[k] - loads_first[k]) / minibatches_in_window;
  finish(report, std::vector<double>(steady.loads.begin(), steady.loads.begin() + window.busy.size()));
  return steady;
}

// The steady state's report with its memory: what a report returned needs, and one
// only compared (the planner's shorter mini-batches) does not.
Report withMemory(Steady& steady, const CostModel& costs) {
  fillMemory(steady.report, steady.window, costs);
  return steady.report;
}

Report steadyReport(const plan::Plan& plan, const CostModel& costs, int minibatches_in_window,
                    plan::Check check = plan::Check::kValidate) {
  Steady steady = steadyState(plan, costs, minibatches_in_window, check);
  return withMemory(steady, costs);
}

// Whether the iteration between two steady states grows at least as fast as every
// resource's load: otherwise some queue (a port fed by more senders than it drains)
// grows with every micro-batch and binds later, beyond m2 (PipeDream's AlexNet on 32
// GPUs, 24 replicas feeding 3: docs/planner.md, "On published profiles: PipeDream's"),
// and the line through the two would not hold.
bool settled(const Steady& a, const Steady& b, int m1, int m2) {
  const double slope = (b.report.iteration_time - a.report.iteration_time) / (m2 - m1);
  for (std::size_t k = 0; k < a.loads.size(); ++k)
    if ((b.loads[k] - a.loads[k]) / (m2 - m1) > slope * (1 + kSettledTolerance)) return false;
  return true;
}

// The report at `m` micro-batches on the line through the reports at m1 and m2: the
// iteration, each rank's compute and each rank's activations grow linearly in the
// steady state.
Report extrapolated(const Report& a, const Report& b, int m1, int m2, int m, int64_t microbatch_size) {
  const double t = static_cast<double>(m - m1) / (m2 - m1);
  auto line = [t](double x, double y) { return x + t * (y - x); };
  Report report = b;
  report.microbatches = m;
  report.samples_per_minibatch = m * microbatch_size;
  report.iteration_time = line(a.iteration_time, b.iteration_time);
  std::vector<double> busy;
  for (std::size_t r = 0; r < report.ranks.size(); ++r) {
    RankReport& rr = report.ranks[r];
    busy.push_back(line(a.ranks[r].busy_seconds, b.ranks[r].busy_seconds));
    rr.peak_activations = line(a.ranks[r].peak_activations, b.ranks[r].peak_activations);
    rr.peak_memory_bytes = static_cast<int64_t>(
        std::llround(line(static_cast<double>(a.ranks[r].peak_memory_bytes), static_cast<double>(b.ranks[r].peak_memory_bytes))));
  }
  finish(report, busy);
  return report;
}

}  // namespace

// Replicas take micro-batches in turn, so past the transient the iteration is periodic
// in a quantum of micro-batches that every replica group divides (and the ranks, where
// a rank runs several stages): m1 is the first count past the transient that leaves m's
// remainder modulo it, m2 the first a whole number of quanta further that is past two
// transients. Used only where m is at least 2 m2: nearer the transient the line came
// out fast (a random chain of 2 stages over a slow link: docs/planner.md, "On published
// profiles: PipeDream's").
namespace {

struct Periodicity {
  int64_t quantum = 1;    // micro-batches the steady state repeats in
  int64_t transient = 0;  // micro-batches past which it does
};

Periodicity periodicityOf(const plan::Plan& plan) {
  Periodicity p;
  int64_t widest = 1;
  for (int r : plan::stageReplicas(plan)) {
    p.quantum = std::lcm(p.quantum, int64_t{r});
    widest = std::max<int64_t>(widest, r);
  }
  if (schedule::multiStage(schedule::traits(plan.schedule.name)))
    p.quantum = std::lcm(p.quantum, static_cast<int64_t>(plan::rankDeviceNames(plan).size()));
  p.transient = int64_t{kTransientDepths} * plan.numStages() * widest;
  return p;
}

// Mini-batches in the window of a whole mini-batch's simulation: one after the first
// where that is already the periodic steady state, i.e. under an asynchronous schedule
// (which never flushes, so the first mini-batch absorbs the pipeline's filling) whose
// mini-batches are past the transient and a whole number of quanta; else kSteadyWindow
// (PipeDream's few micro-batches a mini-batch swing from one to the next). Equal to
// the window of kSteadyWindow to 1e-9 (Evaluate.OneMinibatchWindowWherePeriodic); the
// longer window made PipeDream's long mini-batches slow to plan (docs/time_to_accuracy.md,
// "Planning for time to accuracy").
int wholeMinibatchWindow(const plan::Plan& plan) {
  if (!schedule::isAsynchronous(plan.schedule.name)) return kSteadyWindow;
  const Periodicity p = periodicityOf(plan);
  return plan.microbatches >= p.transient && plan.microbatches % p.quantum == 0 ? 1 : kSteadyWindow;
}

}  // namespace

std::optional<std::pair<int, int>> extrapolationPoints(const plan::Plan& plan) {
  const auto [quantum, transient] = periodicityOf(plan);
  const int64_t m = plan.microbatches;
  // The first count >= `least` congruent to m modulo the quantum.
  auto aligned = [&](int64_t least) { return least + ((m - least) % quantum + quantum) % quantum; };
  const int64_t m1 = aligned(transient), m2 = std::max(m1 + quantum, aligned(2 * transient));
  if (2 * m2 > m) return std::nullopt;
  return std::make_pair(static_cast<int>(m1), static_cast<int>(m2));
}

namespace {

// predictReport with the plan's cost model at hand (evaluatePlan builds it once for
// both), or nothing where it cannot reach `to_beat` samples/s (predictReportAbove). The
// first Program it simulates is checked; the rest are the same plan at other counts.
std::optional<Report> predictReport(const plan::Plan& plan, const CostModel& costs, double to_beat) {
  const bool synchronous = !schedule::isAsynchronous(plan.schedule.name);
  plan::Check check = plan::Check::kValidate;
  if (const auto points = extrapolationPoints(plan)) {
    auto [m1, m2] = *points;
    plan::Plan shorter = plan;
    // One mini-batch after the first, under asynchronous schedules too: at m1 and m2,
    // past the transient, it is the periodic steady state (the window of kSteadyWindow
    // is for mini-batches too short for that), equal to the whole mini-batch's to 1e-9 in
    // Evaluate.ExtrapolatedReportMatchesFullSimulation; a window of kSteadyWindow there
    // made PipeDream's long mini-batches slow to plan (docs/time_to_accuracy.md,
    // "Planning for time to accuracy").
    auto steadyAt = [&](int microbatches) {
      shorter.microbatches = microbatches;
      return steadyState(shorter, costs, 1, std::exchange(check, plan::Check::kSkip));
    };
    try {
      Steady a = steadyAt(m1), b = steadyAt(m2);
      double previous_line = 0;
      while (true) {
        if (settled(a, b, m1, m2))
          return extrapolated(withMemory(a, costs), withMemory(b, costs), m1, m2, plan.microbatches, plan.microbatch_size);
        const Report line = extrapolated(a.report, b.report, m1, m2, plan.microbatches, plan.microbatch_size);
        // A queue still growing between them binds later (PipeDream's AlexNet: from 112
        // and 208 micro-batches it had not yet). It only slows the iteration's growth,
        // so the line is the most the plan can reach, and no more than its busiest
        // resource allows either.
        double iteration = line.iteration_time;
        const double t = static_cast<double>(plan.microbatches - m1) / (m2 - m1);
        for (std::size_t k = 0; k < a.loads.size(); ++k)
          iteration = std::max(iteration, a.loads[k] + t * (b.loads[k] - a.loads[k]));
        if (line.samples_per_minibatch / iteration < to_beat) return std::nullopt;
        // Where the line still bends, one twice as far on, while that costs less than
        // the whole mini-batch: it settles there, or bounds the plan tighter
        // (PipeDream's GNMT as an 11-stage GPipe on 128 GPUs). Where it runs straight on
        // while a queue fills (AlexNet's ports), only the whole mini-batch shows where the
        // queue binds. (Both: docs/planner.md, "On published profiles: PipeDream's".)
        const int further = m2 + 2 * (m2 - m1);  // the same remainder modulo the quantum
        const bool straight = std::abs(line.iteration_time / previous_line - 1) < kStraightTolerance;
        if (straight || 2 * static_cast<int64_t>(further) > plan.microbatches) break;
        previous_line = line.iteration_time;
        a = std::move(b);
        b = steadyAt(further);
        m1 = std::exchange(m2, further);
      }
    } catch (const Error&) {
      // the schedule refuses the plan: the whole mini-batch says so with its own numbers
      check = plan::Check::kValidate;
    }
  }
  // The whole mini-batch. Under a synchronous schedule the mini-batch after the first
  // takes a little longer than the steady window's mean where ports queue up
  // (PipeDream's AlexNet and GNMT: docs/planner.md, "On published profiles: PipeDream's"),
  // at half the simulation: where it falls short of `to_beat` by more than four times the
  // most seen (kFirstMinibatchSpread), the window is not simulated.
  if (synchronous && to_beat > 0) {
    if (steadyState(plan, costs, 1, std::exchange(check, plan::Check::kSkip)).report.throughput <
        to_beat * (1 - kFirstMinibatchSpread))
      return std::nullopt;
  }
  return steadyReport(plan, costs, wholeMinibatchWindow(plan), check);
}

}  // namespace

Report predictReport(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const plan::Plan& plan) {
  return *predictReport(plan, CostModel(graph, cluster, plan), 0);
}

std::optional<Report> predictReportAbove(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                                         const plan::Plan& plan, double to_beat) {
  return predictReport(plan, CostModel(graph, cluster, plan), to_beat);
}

Report simulatedReport(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, const plan::Plan& plan) {
  return steadyReport(plan, CostModel(graph, cluster, plan), kSteadyWindow);
}

Evaluation evaluatePlan(const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                        const plan::Plan& plan, int minibatches) {
  if (minibatches < 1) throw Error("mini-batches to simulate must be at least 1");
  const CostModel costs(graph, cluster, plan);
  Evaluation e;
  e.report = *predictReport(plan, costs, 0);
  e.program = plan::programForPlan(plan, costs.dag(), minibatches);
  e.timeline = simulate(e.program, costs);
  e.timeline.title = plan.schedule.name + ", " + std::to_string(plan.numStages()) + " stages, " +
                     std::to_string(plan.microbatches) + " micro-batches";
  e.report.makespan = e.timeline.makespan();
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
                          {"process_bytes", rr.process_bytes},
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

}  // namespace pipetrain::sim
