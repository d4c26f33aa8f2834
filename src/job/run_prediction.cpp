#include "pipetrain/job/run_prediction.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include "pipetrain/job/local_cluster.h"
#include "pipetrain/plan/plan_program.h"

namespace pipetrain::job {

namespace {

// A stage's replicas: each one's compute on the stage (its mean seconds summed) and its rank.
using Replicas = std::vector<std::pair<double, const RankSeconds*>>;

// The mean over mini-batches of the replicas' largest compute, over `chosen`'s mean; 1
// for one replica or where one timed no mini-batch.
double laggardPace(const Replicas& replicas, const RankSeconds& chosen) {
  std::size_t n = SIZE_MAX;
  for (const auto& [compute, r] : replicas) n = std::min(n, r->minibatch_busy.size());
  if (replicas.size() < 2 || n == 0) return 1;
  double slowest = 0, own = 0;
  for (std::size_t k = 0; k < n; ++k) {
    double most = 0;
    for (const auto& [compute, r] : replicas) most = std::max(most, r->minibatch_busy[k]);
    slowest += most;
    own += chosen.minibatch_busy[k];
  }
  return own > 0 ? slowest / own : 1;
}

}  // namespace

plan::StageSeconds slowestReplicaSeconds(const std::vector<RankSeconds>& ranks) {
  std::map<int, Replicas> replicas;  // per stage
  for (const RankSeconds& rank : ranks) {
    std::map<int, double> compute;
    for (const auto& [key, seconds] : rank.seconds)
      if (key.second != schedule::ActionType::ALLREDUCE) compute[key.first] += seconds;
    for (const auto& [stage, seconds] : compute) replicas[stage].push_back({seconds, &rank});
  }
  plan::StageSeconds out;
  for (const auto& [stage, held] : replicas) {
    const RankSeconds& chosen = *std::max_element(held.begin(), held.end(), [](const auto& a, const auto& b) {
                                   return a.first < b.first;
                                 })->second;
    const double pace = laggardPace(held, chosen);
    for (const auto& [key, seconds] : chosen.seconds)
      if (key.first == stage) out[key] = key.second == schedule::ActionType::ALLREDUCE ? seconds : seconds * pace;
  }
  return out;
}

namespace {

// The plan's own layers, a chain inside each stage, the first reading the last layer of
// each stage it reads; each stage's measured costs sit on its last layer (whose output is
// what crosses to its consumers), the others cost nothing.
graph::LayerGraph graphOfRun(const MeasuredRun& run) {
  const plan::Plan& plan = *run.plan;
  const auto& seconds = run.pricedSeconds();
  auto mean = [&](int s, schedule::ActionType t) {
    auto it = seconds.find({s, t});
    return it == seconds.end() ? 0.0 : it->second;
  };
  std::vector<graph::Layer> layers;
  for (int s = 0; s < plan.numStages(); ++s)
    for (std::size_t i = 0; i < plan.stages[s].layers.size(); ++i) {
      graph::Layer l;
      l.name = plan.stages[s].layers[i];
      l.kind = "measured";
      if (i > 0) l.inputs = {layers.back().name};
      else
        for (int q : run.stage_preds.at(s)) l.inputs.push_back(plan.stages[q].layers.back());
      if (i + 1 == plan.stages[s].layers.size()) {
        l.forward_seconds = mean(s, schedule::ActionType::F);
        const double split_i = mean(s, schedule::ActionType::I), split_w = mean(s, schedule::ActionType::W);
        l.backward_input_seconds = split_i + split_w > 0 ? split_i : mean(s, schedule::ActionType::B);
        l.backward_weight_seconds = l.split_weight_seconds = split_w;
        // A stage recomputing all its layers ran F without a graph and the forward pass
        // again at the start of B (or I). The cost model adds `forward_seconds` to B and I
        // of a recomputing layer, so that part comes out of them here; it is not timed
        // apart, and F stands for it (before, the summary's prediction counted it twice and
        // came out well short: docs/planner.md, "Recomputation").
        if (plan.stages[s].recomputedLayers() == static_cast<int>(plan.stages[s].layers.size())) {
          l.forward_no_grad_seconds = l.forward_seconds;
          l.backward_input_seconds = std::max(0.0, l.backward_input_seconds - l.forward_seconds);
        }
        l.optimizer_seconds = mean(s, schedule::ActionType::STEP);
        l.output_bytes = l.saved_activation_bytes = run.stage_output_bytes.at(s);
        l.param_bytes = run.stage_param_bytes.at(s);
      }
      layers.push_back(l);
    }
  return graph::LayerGraph(layers, plan.microbatch_size, "measured run");
}

// The cluster the run ran on, each rank's device with `overheads` around its actions.
// The plan was validated before it ran, so its ranks' devices are distinct.
cluster::ClusterSpec clusterOfRun(const MeasuredRun& run, const std::vector<double>& overheads) {
  const std::vector<std::string> devices = plan::rankDeviceNames(*run.plan);
  const int ranks = static_cast<int>(devices.size());
  if (run.hosts) {
    std::map<std::string, double> by_device;
    for (std::size_t r = 0; r < devices.size(); ++r) by_device[devices[r]] = overheads[r];
    return clusterOfHosts(*run.hosts, std::numeric_limits<int64_t>::max(), by_device);
  }
  const bool shared = ranks > run.concurrent_ranks;
  return localCluster(devices, std::numeric_limits<int64_t>::max(), shared ? run.concurrent_ranks : ranks, run.sums,
                      /*gpus=*/false, overheads);
}

// What runtimeSecondsPerAction says, on the run's graph.
std::vector<double> overheadsOf(const MeasuredRun& run, const graph::LayerGraph& graph) {
  const std::size_t ranks = plan::rankDeviceNames(*run.plan).size();
  const cluster::ClusterSpec unpriced = clusterOfRun(run, std::vector<double>(ranks, 0.0));
  const sim::CostModel costs(graph, unpriced, *run.plan);  // holds the two by reference
  const schedule::Program program = plan::programForPlan(*run.plan, costs.dag());
  std::vector<double> out;
  for (int r = 0; r < program.numRanks(); ++r) {
    const auto& actions = program.ranks[static_cast<std::size_t>(r)];
    double sends = 0;
    for (const schedule::Action& a : actions)
      if (schedule::isSend(a.type)) sends += costs.hostSeconds(a, r, program.rankOf(a.peer_stage, a.microbatch));
    const double measured = static_cast<std::size_t>(r) < run.framework_seconds_per_action.size()
                                ? run.framework_seconds_per_action[static_cast<std::size_t>(r)]
                                : 0.0;
    out.push_back(std::max(0.0, measured - (actions.empty() ? 0.0 : sends / static_cast<double>(actions.size()))));
  }
  return out;
}

}  // namespace

std::vector<double> runtimeSecondsPerAction(const MeasuredRun& run) { return overheadsOf(run, graphOfRun(run)); }

sim::Evaluation predictRun(const MeasuredRun& run) {
  const graph::LayerGraph graph = graphOfRun(run);
  return sim::evaluatePlan(graph, clusterOfRun(run, overheadsOf(run, graph)), *run.plan);
}

}  // namespace pipetrain::job
