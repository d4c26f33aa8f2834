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
