#include "pipetrain/sim/simulation_job.h"

#include "pipetrain/planner/profile_fit.h"
#include "pipetrain/schedule/csv_schedule.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/text.h"

namespace pipetrain::sim {
namespace {

// A plan that runs out of memory is not a plan: say which rank and by how much.
void checkFits(const Report& r, const std::string& origin) {
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const auto& rr = r.ranks[i];
    if (rr.peak_memory_bytes > rr.memory_capacity_bytes)
      throw Error(origin + ": under " + r.schedule + ", rank " + std::to_string(i) + " needs " +
                  text::humanBytes(rr.peak_memory_bytes) + " at its peak, but device '" + rr.device + "' has " +
                  text::humanBytes(rr.memory_capacity_bytes) + " (fewer micro-batches in flight, more stages, or a "
                  "larger device would help)");
  }
}

}  // namespace

std::vector<options::Option> simulationOptions(SimulationRequest& r) {
  using options::Option;
  const std::string group = "Options";
  return {
      {"graph", group, "layer graph JSON (with --cluster and --plan)", &r.graph},
      {"cluster", group, "cluster spec JSON", &r.cluster},
      {"plan", group, "plan JSON", &r.plan},
      Option{"schedule", group, "schedule for --uniform", &r.schedule.name}.shown(),
      Option{"stages", group, "ranks for --uniform", &r.stages}.positive(),
      Option{"microbatches", group, "micro-batches per mini-batch for --uniform", &r.microbatches}.positive().shown(),
      Option{"chunks", group, "interleaved: stages per rank", &r.schedule.chunks}.positive(),
      {"vertical-sync", group, "pipedream: vertical sync", &r.schedule.vertical_sync},
      Option{"uniform", group,
             "equal stage costs F,B[,W] in seconds (W = weight-gradient part of B), free communication", &r.uniform}
          .repeated(),
      Option{"minibatches", group, "mini-batches in the simulated program (and the trace)", &r.minibatches}
          .positive()
          .shown(),
      {"overlap-factor", group,
       "time of an overlapped forward+backward pair (dualpipev) as a share of the two in sequence, 0.5..1 (default: "
       "the graph's overlap_factor, else 1)",
       &r.overlap_factor},
      {"csv", group, "simulate this per-rank CSV schedule instead of a generated one", &r.csv},
  };
}

SimulatedPlan simulate(const SimulationRequest& a) {
  const bool from_files = !a.graph.empty() || !a.cluster.empty() || !a.plan.empty();
  if (from_files && (a.graph.empty() || a.cluster.empty() || a.plan.empty()))
    throw Error("simulate: --graph, --cluster and --plan go together");
  if (from_files == !a.uniform.empty())
    throw Error("simulate: give either --graph G --cluster C --plan P, or --schedule NAME --stages P "
                "--microbatches M --uniform F,B[,W]");
  SimulatedPlan s;
  if (from_files) {
    s.graph = graph::LayerGraph::load(a.graph);
    planner::ProfileFit fit = planner::fitProfileToCluster(s.graph, cluster::ClusterSpec::load(a.cluster));
    s.cluster = std::move(fit.cluster);
    s.note = std::move(fit.note);
    s.plan = plan::Plan::load(a.plan);
    plan::validate(s.plan, s.graph, s.cluster, a.plan);
    s.origin = a.plan;
  } else {
    if (a.uniform.size() < 2 || a.uniform.size() > 3) throw Error("--uniform takes F,B or F,B,W (seconds)");
    if (a.stages < 1) throw Error("--stages must be at least 1");
    schedule::checkScheduleName(a.schedule.name);
    UniformScenario u = uniformScenario(a.schedule, a.stages, a.microbatches, a.uniform[0], a.uniform[1],
                                        a.uniform.size() == 3 ? a.uniform[2] : 0.0);
    s.graph = std::move(u.graph);
    s.cluster = std::move(u.cluster);
    s.plan = std::move(u.plan);
    s.origin = "--uniform";
  }
  if (a.overlap_factor != 0) s.graph.setOverlapFactor(a.overlap_factor);
  if (!a.csv.empty()) {
    const CostModel costs(s.graph, s.cluster, s.plan);
    const schedule::CsvSchedule csv = schedule::readCsvSchedule(text::readFile(a.csv), a.csv, costs.dag());
    schedule::validateCsvSchedule(csv);  // errors with the file's line and column
    s.evaluation = evaluateProgram(csv.program, costs);
  } else {
    s.evaluation = evaluatePlan(s.graph, s.cluster, s.plan, a.minibatches);
  }
  checkFits(s.evaluation.report, s.origin);
  return s;
}

}  // namespace pipetrain::sim
