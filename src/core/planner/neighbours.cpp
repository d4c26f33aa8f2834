#include "pipetrain/planner/neighbours.h"

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "pipetrain/schedule/schedule_traits.h"

namespace pipetrain::planner {

std::optional<ChainRuns> chainRuns(const plan::Plan& plan, const graph::LayerGraph& graph,
                                   const cluster::ClusterSpec& cluster) {
  if (plan.schedule.chunks != 1) return std::nullopt;
  ChainRuns runs;
  int next_layer = 0, next_device = 0;
  for (const plan::Stage& s : plan.stages) {
    runs.layer.push_back(next_layer);
    runs.device.push_back(next_device);
    for (const std::string& name : s.layers)
      if (graph.indexOf(name) != next_layer++) return std::nullopt;
    for (const std::string& name : s.devices)
      if (cluster.indexOf(name) != next_device++) return std::nullopt;
  }
  runs.layer.push_back(next_layer);
  runs.device.push_back(next_device);
  if (next_layer != graph.size()) return std::nullopt;
  return runs;
}

plan::Plan planOfRuns(const plan::Plan& like, const ChainRuns& runs, const graph::LayerGraph& graph,
                      const cluster::ClusterSpec& cluster) {
  plan::Plan p = like;
  p.stages.assign(runs.numStages(), {});
  for (int s = 0; s < runs.numStages(); ++s) {
    plan::Stage& stage = p.stages[s];
    stage.layers.reserve(runs.layer[s + 1] - runs.layer[s]);
    stage.devices.reserve(runs.device[s + 1] - runs.device[s]);
    for (int l = runs.layer[s]; l < runs.layer[s + 1]; ++l) stage.layers.push_back(graph.layer(l).name);
    for (int d = runs.device[s]; d < runs.device[s + 1]; ++d) stage.devices.push_back(cluster.device(d).name);
  }
  return p;
}

std::optional<std::vector<int>> multiStageBounds(const plan::Plan& plan, const graph::LayerGraph& graph) {
  if (!schedule::multiStage(schedule::traits(plan.schedule.name))) return std::nullopt;
  std::vector<int> bounds;
  int next_layer = 0;
  for (const plan::Stage& s : plan.stages) {
    if (s.devices.size() != 1 || s.layers.empty()) return std::nullopt;
    bounds.push_back(next_layer);
    for (const std::string& name : s.layers)
      if (graph.indexOf(name) != next_layer++) return std::nullopt;
  }
  if (next_layer != graph.size()) return std::nullopt;
  bounds.push_back(next_layer);
  return bounds;
}

double splitCount(int layers, int stages) {
  double count = 1;
  for (int k = 1; k < stages; ++k) count = count * (layers - k) / k;
  return count;
}

std::vector<std::vector<int>> everySplit(int layers, int stages, std::size_t limit) {
  if (stages < 1 || stages > layers || splitCount(layers, stages) > static_cast<double>(limit)) return {};
  std::vector<std::vector<int>> out;
  std::vector<int> bounds{0};
  std::function<void()> extend = [&] {
    const int s = static_cast<int>(bounds.size()) - 1;
    if (s == stages - 1) {
      bounds.push_back(layers);
      out.push_back(bounds);
      bounds.pop_back();
      return;
    }
    for (int to = bounds.back() + 1; to <= layers - (stages - 1 - s); ++to) {
      bounds.push_back(to);
      extend();
      bounds.pop_back();
    }
  };
  extend();
  return out;
}

std::vector<plan::Plan> multiStageNeighbours(const plan::Plan& plan, const std::vector<int>& bounds,
                                             const graph::LayerGraph& graph) {
  std::vector<plan::Plan> out;
  auto split = [&](const std::vector<int>& moved) {
    plan::Plan p = plan;
    for (std::size_t s = 0; s + 1 < moved.size(); ++s) {
      p.stages[s].layers.clear();
      for (int l = moved[s]; l < moved[s + 1]; ++l) p.stages[s].layers.push_back(graph.layer(l).name);
    }
    out.push_back(std::move(p));
  };
  const int layers = bounds.back(), stages = static_cast<int>(bounds.size()) - 1;
  if (const auto all = everySplit(layers, stages, kEverySplitUpTo); !all.empty()) {
    for (const std::vector<int>& other : all)
      if (other != bounds) split(other);
    return out;
  }
  const int inner = stages - 1;  // boundaries between stages
  // Boundary b, or b and the next together (a stage moved whole), by `step` layers.
  for (int b = 1; b <= inner; ++b)
    for (int together = 1; together <= 2 && b + together - 1 <= inner; ++together)
    for (int step : {-2, -1, 1, 2}) {
      if (together == 2 && std::abs(step) == 2) continue;
      std::vector<int> moved = bounds;
      for (int k = b; k < b + together; ++k) moved[k] += step;
      bool ordered = true;
      for (std::size_t k = 1; k < moved.size(); ++k) ordered = ordered && moved[k] > moved[k - 1];
      if (ordered) split(moved);
    }
  return out;
}

std::vector<double> crossingBytes(const graph::LayerGraph& graph) {
  // Layer u's output crosses every cut after it up to its last reader's: summed as
  // differences, one pass over the edges.
  std::vector<double> change(graph.size() + 1, 0.0);
  for (int u = 0; u < graph.size(); ++u) {
    int last = u;
    for (int v : graph.successors(u)) last = std::max(last, v);
    if (last == u) continue;
    const auto bytes = static_cast<double>(graph.layer(u).output_bytes);
    change[u + 1] += bytes;
    change[last + 1] -= bytes;
  }
  std::vector<double> crossing(graph.size() + 1, 0.0);
  double sum = 0;
  for (int k = 0; k <= graph.size(); ++k) crossing[k] = sum += change[k];
  return crossing;
}

namespace {

// Whether `r` is a plan: every stage keeps a layer, its replicas split the micro-batches
// and stay within `max_replicas` (0: any), and the devices are the cluster's.
bool usable(const plan::Plan& plan, const ChainRuns& r, const cluster::ClusterSpec& cluster, int max_replicas) {
  const schedule::ScheduleTraits& traits = schedule::traits(plan.schedule.name);
  if (!traits.replicable) max_replicas = 1;
  for (int s = 0; s < r.numStages(); ++s) {
    const int replicas = r.device[s + 1] - r.device[s];
    if (r.layer[s + 1] <= r.layer[s] || !schedule::replicasCanSplit(traits, plan.microbatches, replicas)) return false;
    if (max_replicas > 0 && replicas > max_replicas) return false;
  }
  return r.device[r.numStages()] <= cluster.size();
}

}  // namespace

// A boundary carried to the nearest cut either way that fewer bytes cross, alone, or with
// the boundary before or after it moved the same way by as much work, so that the stage
// between the two keeps its work. The boundary's own moves step by 1, 2, 4, ... layers,
// blind to where the model's blocks end: on Inception-v3 (PipeDream's profile, 32 GPUs,
// pipedream) the best plan moves the second boundary 4 layers to where 65 MB cross, not
// 78, and the first 3 layers to rebalance; each alone, or both by the same count, is
// slower (docs/planner.md, "Cuts where fewer bytes cross").
std::vector<ChainRuns> cheaperCutRuns(const plan::Plan& plan, const ChainRuns& runs,
                                      const cluster::ClusterSpec& cluster, const ChainCuts& cuts, int max_replicas) {
  const int stages = runs.numStages();
  std::vector<ChainRuns> out;
  auto offer = [&](ChainRuns r) {
    if (usable(plan, r, cluster, max_replicas)) out.push_back(std::move(r));
  };
  // The boundary position whose work before it is nearest to `work`.
  auto atWork = [&](double work) {
    const auto it = std::lower_bound(cuts.work.begin(), cuts.work.end(), work);
    if (it == cuts.work.end()) return static_cast<int>(cuts.work.size()) - 1;
    const int k = static_cast<int>(it - cuts.work.begin());
    return k > 0 && work - cuts.work[k - 1] < *it - work ? k - 1 : k;
  };
  for (int s = 1; s < stages; ++s) {
    const int from = runs.layer[s];
    for (int direction : {-1, 1}) {
      int to = from + direction;
      while (to > runs.layer[s - 1] && to < runs.layer[s + 1] && cuts.crossing[to] >= cuts.crossing[from])
        to += direction;
      if (to <= runs.layer[s - 1] || to >= runs.layer[s + 1]) continue;
      ChainRuns alone = runs;
      alone.layer[s] = to;
      offer(alone);
      const double shift = cuts.work[to] - cuts.work[from];
      for (int other : {s - 1, s + 1}) {
        if (other < 1 || other >= stages) continue;
        ChainRuns both = alone;
        both.layer[other] = atWork(cuts.work[runs.layer[other]] + shift);
        if (both.layer[other] != runs.layer[other]) offer(std::move(both));
      }
    }
  }
  return out;
}

std::vector<ChainRuns> neighbourRuns(const plan::Plan& plan, const ChainRuns& runs, const cluster::ClusterSpec& cluster,
                                     int max_replicas) {
  const int stages = runs.numStages();
  std::vector<ChainRuns> out;
  auto offer = [&](ChainRuns r) {
    if (usable(plan, r, cluster, max_replicas)) out.push_back(std::move(r));
  };
  auto moved = [&](std::vector<int> ChainRuns::*field, int at, int step) {
    ChainRuns r = runs;
    (r.*field)[at] += step;
    return r;
  };
  // Boundaries moved by 1, 2, 4, ... places: a walk by single layers took a step, and a
  // simulation, per layer (ResNet-50's 176 layers).
  for (int s = 1; s < stages; ++s)
    for (int step = 1; step < std::max(runs.layer[stages], runs.device[stages]); step *= 2)
      for (int sign : {-1, 1}) {
        if (step < runs.layer[stages]) offer(moved(&ChainRuns::layer, s, sign * step));
        if (step < cluster.size()) offer(moved(&ChainRuns::device, s, sign * step));
      }
  // An inner stage's layers shifted whole by 1, 2, 4, ... places: its boundaries moved
  // together. Moved one at a time, the first move overloads a neighbour and is refused
  // (docs/planner.md, "Walks best first, on a budget counted in actions").
  for (int s = 1; s + 1 < stages; ++s)
    for (int step = 1; step < runs.layer[stages]; step *= 2)
      for (int sign : {-1, 1}) {
        ChainRuns r = moved(&ChainRuns::layer, s, sign * step);
        r.layer[s + 1] += sign * step;
        offer(std::move(r));
      }
  // An inner stage grown or shrunk at both ends, by 1 or 2 layers at each: a stage that
  // takes layers from both neighbours, where taking them from one at a time overloads it
  // before the second move pays (docs/planner.md, "Walks best first, on a budget counted
  // in actions"). Larger steps, or both ends moved the same way by different amounts,
  // cost more simulations than they gained.
  for (int s = 1; s + 1 < stages; ++s)
    for (int front : {1, 2})
      for (int back : {1, 2})
        for (int sign : {-1, 1}) {
          ChainRuns r = moved(&ChainRuns::layer, s, sign * front);  // -: the stage grows
          r.layer[s + 1] -= sign * back;
          offer(std::move(r));
        }
  for (int step = 1; step < cluster.size(); step *= 2)
    for (int sign : {-1, 1}) offer(moved(&ChainRuns::device, stages, sign * step));
  for (int s = 1; s < stages; ++s) {  // stages s - 1 and s merged, with both device blocks
    ChainRuns r = runs;
    r.layer.erase(r.layer.begin() + s);
    r.device.erase(r.device.begin() + s);
    offer(std::move(r));
  }
  for (int s = 0; s < stages; ++s) {  // stage s split at any layer, its devices halved
    const int replicas = runs.device[s + 1] - runs.device[s];
    if (replicas < 2) continue;
    for (int at = runs.layer[s] + 1; at < runs.layer[s + 1]; ++at) {
      ChainRuns r = runs;
      r.layer.insert(r.layer.begin() + s + 1, at);
      r.device.insert(r.device.begin() + s + 1, runs.device[s] + replicas / 2);
      offer(std::move(r));
    }
  }
  const int last_replicas = runs.device[stages] - runs.device[stages - 1];
  for (int replicas : {1, last_replicas}) {  // the last stage's tail on a new stage of idle devices
    for (int at = runs.layer[stages - 1] + 1; at < runs.layer[stages]; ++at) {
      ChainRuns r = runs;
      r.layer.insert(r.layer.end() - 1, at);
      r.device.push_back(runs.device[stages] + replicas);
      offer(std::move(r));
    }
    if (last_replicas == 1) break;
  }
  return out;
}

std::vector<plan::Plan> chainNeighbours(const plan::Plan& plan, const graph::LayerGraph& graph,
                                        const cluster::ClusterSpec& cluster, int max_replicas) {
  const std::optional<ChainRuns> runs = chainRuns(plan, graph, cluster);
  if (!runs) return {};
  plan::Plan shell = plan;
  shell.stages.clear();
  std::vector<plan::Plan> out;
  for (const ChainRuns& r : neighbourRuns(plan, *runs, cluster, max_replicas))
    out.push_back(planOfRuns(shell, r, graph, cluster));
  return out;
}

}  // namespace pipetrain::planner
