#include "pipetrain/planner/neighbours.h"

#include "pipetrain/schedule/schedule_traits.h"

namespace pipetrain::planner {
namespace {

// A chain plan as runs: stage s holds layers [layer[s], layer[s + 1]) on devices
// [device[s], device[s + 1]).
struct Runs {
  std::vector<int> layer, device;
};

bool toRuns(const plan::Plan& plan, const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster, Runs& runs) {
  int next_layer = 0, next_device = 0;
  for (const plan::Stage& s : plan.stages) {
    runs.layer.push_back(next_layer);
    runs.device.push_back(next_device);
    for (const std::string& name : s.layers)
      if (graph.indexOf(name) != next_layer++) return false;
    for (const std::string& name : s.devices)
      if (cluster.indexOf(name) != next_device++) return false;
  }
  runs.layer.push_back(next_layer);
  runs.device.push_back(next_device);
  return next_layer == graph.size();
}

// `like` with the stages of `runs`; `like` has no stages (copying them would be most of
// the work on long chains).
plan::Plan fromRuns(const plan::Plan& like, const Runs& runs, const graph::LayerGraph& graph,
                    const cluster::ClusterSpec& cluster) {
  plan::Plan p = like;
  p.stages.resize(runs.layer.size() - 1);
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    p.stages[s].layers.reserve(runs.layer[s + 1] - runs.layer[s]);
    p.stages[s].devices.reserve(runs.device[s + 1] - runs.device[s]);
    for (int l = runs.layer[s]; l < runs.layer[s + 1]; ++l) p.stages[s].layers.push_back(graph.layer(l).name);
    for (int d = runs.device[s]; d < runs.device[s + 1]; ++d) p.stages[s].devices.push_back(cluster.device(d).name);
  }
  return p;
}

}  // namespace

std::vector<plan::Plan> chainNeighbours(const plan::Plan& plan, const graph::LayerGraph& graph,
                                        const cluster::ClusterSpec& cluster, int max_replicas) {
  Runs runs;
  if (plan.schedule.chunks != 1 || !toRuns(plan, graph, cluster, runs)) return {};
  const schedule::ScheduleTraits& traits = schedule::traits(plan.schedule.name);
  if (!traits.replicable) max_replicas = 1;
  const int stages = plan.numStages();
  auto usable = [&](const Runs& r) {
    const int count = static_cast<int>(r.layer.size()) - 1;
    for (int s = 0; s < count; ++s) {
      const int replicas = r.device[s + 1] - r.device[s];
      if (r.layer[s + 1] <= r.layer[s] || !schedule::replicasCanSplit(traits, plan.microbatches, replicas))
        return false;
      if (max_replicas > 0 && replicas > max_replicas) return false;
    }
    return r.device[count] <= cluster.size();
  };
  plan::Plan shell = plan;
  shell.stages.clear();
  std::vector<plan::Plan> out;
  auto offer = [&](const Runs& r) {
    if (usable(r)) out.push_back(fromRuns(shell, r, graph, cluster));
  };
  auto moved = [&](std::vector<int> Runs::*field, int at, int step) {
    Runs r = runs;
    (r.*field)[at] += step;
    return r;
  };
  for (int s = 1; s < stages; ++s)
    for (int step : {-1, 1}) {
      offer(moved(&Runs::layer, s, step));
      offer(moved(&Runs::device, s, step));
    }
  for (int step : {-1, 1}) offer(moved(&Runs::device, stages, step));
  for (int s = 1; s < stages; ++s) {  // stages s - 1 and s merged, with both device blocks
    Runs r = runs;
    r.layer.erase(r.layer.begin() + s);
    r.device.erase(r.device.begin() + s);
    offer(r);
  }
  for (int s = 0; s < stages; ++s) {  // stage s split at any layer, its devices halved
    const int replicas = runs.device[s + 1] - runs.device[s];
    if (replicas < 2) continue;
    for (int at = runs.layer[s] + 1; at < runs.layer[s + 1]; ++at) {
      Runs r = runs;
      r.layer.insert(r.layer.begin() + s + 1, at);
      r.device.insert(r.device.begin() + s + 1, runs.device[s] + replicas / 2);
      offer(r);
    }
  }
  const int last_replicas = runs.device[stages] - runs.device[stages - 1];
  for (int replicas : {1, last_replicas}) {  // the last stage's tail on a new stage of idle devices
    for (int at = runs.layer[stages - 1] + 1; at < runs.layer[stages]; ++at) {
      Runs r = runs;
      r.layer.insert(r.layer.end() - 1, at);
      r.device.push_back(runs.device[stages] + replicas);
      offer(r);
    }
    if (last_replicas == 1) break;
  }
  return out;
}

bool isChainPlan(const plan::Plan& plan, const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster) {
  Runs runs;
  return plan.schedule.chunks == 1 && toRuns(plan, graph, cluster, runs);
}

}  // namespace pipetrain::planner
