// validate(): everything a plan must satisfy before a schedule is built from it.
//
// Checks run from the cheapest and most basic (numbers, names) to the structural
// (convexity, stage cycles) and finally memory, so the first message a user sees is
// about the most fundamental mistake. Stages are numbered from 0, as in "stages[i]".
#include <algorithm>
#include <cstdio>
#include <deque>
#include <queue>

#include "pipetrain/graph/heap_share.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/util/text.h"

namespace pipetrain::plan {
namespace {

using graph::LayerGraph;

std::string quote(const std::string& s) { return "'" + s + "'"; }
std::string stageName(int s) { return "stage " + std::to_string(s); }


class Validator {
 public:
  Validator(const Plan& plan, const LayerGraph& graph, const cluster::ClusterSpec& cluster, const std::string& origin)
      : plan_(plan), graph_(graph), cluster_(cluster), origin_(origin) {}

  void run(const std::vector<int64_t>& stage_memory_bytes) {
    checkNumbers();
    assignLayers();
    checkDevices();
    checkConvex();
    checkStageCycles();
    checkRoutes();
    checkMemory(stage_memory_bytes);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { throw Error(origin_ + ": " + message); }

  const schedule::ScheduleTraits& traits() const { return schedule::traits(plan_.schedule.name); }
  int stagesPerRank() const { return schedule::stagesPerRank(traits(), plan_.schedule.chunks); }

  void checkNumbers() const {
    try {
      schedule::checkScheduleName(plan_.schedule.name);
    } catch (const Error& e) {
      fail(std::string("schedule: ") + e.what());
    }
    if (plan_.schedule.pipemare_warmup_steps < 0)
      fail("schedule.pipemare_warmup_steps must not be negative (found " +
           std::to_string(plan_.schedule.pipemare_warmup_steps) + ")");
    if (!(plan_.schedule.pipemare_decay > 0 && plan_.schedule.pipemare_decay < 1))
      fail("schedule.pipemare_decay must lie strictly between 0 and 1 (found " +
           std::to_string(plan_.schedule.pipemare_decay) + ")");
    if (plan_.microbatch_size < 1)
      fail("microbatch_size must be at least 1 (found " + std::to_string(plan_.microbatch_size) + ")");
    if (plan_.microbatches < 1)
      fail("microbatches must be at least 1 (found " + std::to_string(plan_.microbatches) + ")");
    if (plan_.schedule.chunks < 1)
      fail("schedule.chunks must be at least 1 (found " + std::to_string(plan_.schedule.chunks) + ")");
    if (plan_.schedule.chunks > 1 && traits().placement != schedule::Placement::kLooped)
      fail("schedule.chunks = " + std::to_string(plan_.schedule.chunks) +
           " only applies to the interleaved schedule, not '" + plan_.schedule.name + "'");
    if (plan_.stages.empty()) fail("the plan has no stages");
    for (int s = 0; s < plan_.numStages(); ++s) {
      const plan::Stage& stage = plan_.stages[s];
      if (stage.recompute_layers < 0 || stage.recompute_layers > static_cast<int>(stage.layers.size()) ||
          (stage.recompute_layers > 0 && !stage.recompute))
        fail(stageName(s) + ": recompute_layers = " + std::to_string(stage.recompute_layers) +
             " must lie in 1.." + std::to_string(stage.layers.size()) + " (its layers), with recompute set");
    }
    if (traits().backward_weights == schedule::BackwardWeights::kLatest)
      for (int s = 0; s < plan_.numStages(); ++s)
        if (plan_.stages[s].recompute)
          fail(stageName(s) + " recomputes its activations, which '" + plan_.schedule.name +
               "' cannot: its backward pass reads the latest weights, and the ones the forward pass read are gone "
               "when it would run again");
  }

  void assignLayers() {
    stage_of_.assign(graph_.size(), -1);
    for (int s = 0; s < plan_.numStages(); ++s) {
      const Stage& st = plan_.stages[s];
      if (st.layers.empty()) fail(stageName(s) + " has no layers");
      for (const std::string& name : st.layers) {
        const int i = graph_.indexOf(name);
        if (i < 0) fail(stageName(s) + " lists layer " + quote(name) + " which the model does not have");
        if (stage_of_[i] == s) fail(stageName(s) + " lists layer " + quote(name) + " twice");
        if (stage_of_[i] >= 0)
          fail("layer " + quote(name) + " is in " + stageName(stage_of_[i]) + " and " + stageName(s));
        stage_of_[i] = s;
      }
    }
    const auto missing = std::count(stage_of_.begin(), stage_of_.end(), -1);
    if (missing > 0) {
      const int first = static_cast<int>(std::find(stage_of_.begin(), stage_of_.end(), -1) - stage_of_.begin());
      fail("layer " + quote(graph_.layer(first).name) + " is in no stage" +
           (missing > 1 ? " (and " + std::to_string(missing - 1) + " more layers are unassigned)" : ""));
    }
  }

  void checkDevices() {
    device_stages_.assign(cluster_.size(), {});
    for (int s = 0; s < plan_.numStages(); ++s) {
      const Stage& st = plan_.stages[s];
      if (st.devices.empty()) fail(stageName(s) + " has no devices");
      std::vector<int> mine;
      for (const std::string& name : st.devices) {
        const int d = cluster_.indexOf(name);
        if (d < 0) fail(stageName(s) + " lists device " + quote(name) + " which the cluster does not have");
        if (std::find(mine.begin(), mine.end(), d) != mine.end())
          fail(stageName(s) + " lists device " + quote(name) + " twice");
        mine.push_back(d);
        device_stages_[d].push_back(s);
      }
    }
    if (stagesPerRank() > 1) {
      checkSharedLayout();
      return;
    }
    for (int d = 0; d < cluster_.size(); ++d)
      if (device_stages_[d].size() > 1)
        fail("device " + quote(cluster_.device(d).name) + " is used by " + stageName(device_stages_[d][0]) +
             " and " + stageName(device_stages_[d][1]) +
             " (one device runs one stage, except under the interleaved, zb-v and dualpipev schedules)");
  }

  // When a rank runs several stages, the schedule's placement fixes the layout.
  void checkSharedLayout() const {
    const int v = stagesPerRank(), n = plan_.numStages();
    const schedule::Placement placement = traits().placement;
    const std::string rule = placement == schedule::Placement::kV
                                 ? "stage s on the same device as stage 2p-1-s"
                                 : "stage s on the same device as stage s mod p";
    const std::string layout = "under the " + plan_.schedule.name + " schedule a device runs " + std::to_string(v) +
                               " stages, so the plan needs p*" + std::to_string(v) +
                               " stages, each on exactly one device, with " + rule +
                               " and p distinct devices for stages 0..p-1";
    if (n % v != 0) fail(layout + "; this plan has " + std::to_string(n) + " stages, not a multiple of " +
                         std::to_string(v));
    const int p = n / v;
    for (int s = 0; s < n; ++s)
      if (plan_.stages[s].devices.size() != 1)
        fail(layout + "; " + stageName(s) + " has " + std::to_string(plan_.stages[s].devices.size()) + " devices");
    for (int s = 0; s < p; ++s)
      for (int t = 0; t < s; ++t)
        if (plan_.stages[s].devices[0] == plan_.stages[t].devices[0])
          fail(layout + "; " + stageName(t) + " and " + stageName(s) + " both use device " +
               quote(plan_.stages[s].devices[0]));
    for (int s = p; s < n; ++s) {
      const int first = schedule::placedRank(placement, s, p);
      if (plan_.stages[s].devices[0] != plan_.stages[first].devices[0])
        fail(layout + "; " + stageName(s) + " uses device " + quote(plan_.stages[s].devices[0]) + " but " +
             stageName(first) + " uses " + quote(plan_.stages[first].devices[0]));
    }
  }

  // A stage is convex when no path leaves it and comes back. Search forward from the
  // stage's outside successors; only layers before the stage's last one (in
  // topological order) can lead back into it, which keeps chains linear-time.
  void checkConvex() const {
    const int n = graph_.size();
    std::vector<int> mark(n, -1), source(n), first_out(n);
    std::deque<int> queue;
    for (int s = 0; s < plan_.numStages(); ++s) {
      int last = 0;
      for (const std::string& name : plan_.stages[s].layers) last = std::max(last, graph_.indexOf(name));
      queue.clear();
      for (const std::string& name : plan_.stages[s].layers) {
        const int a = graph_.indexOf(name);
        for (int x : graph_.successors(a))
          if (stage_of_[x] != s && x < last && mark[x] != s) {
            mark[x] = s;
            source[x] = a;
            first_out[x] = x;
            queue.push_back(x);
          }
      }
      while (!queue.empty()) {
        const int x = queue.front();
        queue.pop_front();
        for (int y : graph_.successors(x)) {
          if (stage_of_[y] == s)
            fail(stageName(s) + " is not convex: layer " + quote(graph_.layer(source[x]).name) + " (" +
                 stageName(s) + ") reaches layer " + quote(graph_.layer(y).name) + " (" + stageName(s) +
                 ") through layer " + quote(graph_.layer(first_out[x]).name) + " (" +
                 stageName(stage_of_[first_out[x]]) + "); a stage must hold every layer on a path "
                 "between two of its layers");
          if (y < last && mark[y] != s) {
            mark[y] = s;
            source[y] = source[x];
            first_out[y] = first_out[x];
            queue.push_back(y);
          }
        }
      }
    }
  }

  // Convex stages can still feed each other both ways (a -> d and b -> c with
  // stages {a, c} and {b, d}); no schedule can run such a plan.
  void checkStageCycles() {
    graph_of_stages_ = stageGraph(plan_, graph_);
    const int p = plan_.numStages();
    std::vector<int> pending(p);
    std::queue<int> ready;
    for (int s = 0; s < p; ++s)
      if ((pending[s] = static_cast<int>(graph_of_stages_.preds[s].size())) == 0) ready.push(s);
    int done = 0;
    std::vector<bool> sorted(p, false);
    while (!ready.empty()) {
      const int s = ready.front();
      ready.pop();
      sorted[s] = true;
      ++done;
      for (int t : graph_of_stages_.succs[s])
        if (--pending[t] == 0) ready.push(t);
    }
    if (done == p) return;
    // Every unsorted stage has an unsorted predecessor: walk back until one repeats.
    int s = static_cast<int>(std::find(sorted.begin(), sorted.end(), false) - sorted.begin());
    std::vector<int> seen_at(p, -1), walk;
    while (seen_at[s] < 0) {
      seen_at[s] = static_cast<int>(walk.size());
      walk.push_back(s);
      for (int q : graph_of_stages_.preds[s])
        if (!sorted[q]) {
          s = q;
          break;
        }
    }
    std::vector<int> cycle(walk.rbegin(), walk.rend() - seen_at[s]);  // along the edges
    std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
    std::string text;
    for (int c : cycle) text += stageName(c) + " -> ";
    fail("the stages form a cycle: " + text + stageName(cycle.front()) + "; data between stages must flow one way");
  }

  // A cluster without levels only connects devices joined by a link; every pair
  // that exchanges activations or gradients needs a route.
  void checkRoutes() const {
    if (!cluster_.levels().empty()) return;  // the top level joins every pair of devices
    auto need = [&](const std::string& a, const std::string& b, const std::string& why) {
      try {
        cluster_.route(cluster_.indexOf(a), cluster_.indexOf(b));
      } catch (const Error&) {
        fail(why + ", but the cluster has no route from device " + quote(a) + " to device " + quote(b) +
             " (add a level or a link)");
      }
    };
    for (int s = 0; s < plan_.numStages(); ++s) {
      const auto& devices = plan_.stages[s].devices;
      for (std::size_t i = 0; i + 1 < devices.size(); ++i)
        for (std::size_t j = i + 1; j < devices.size(); ++j)
          need(devices[i], devices[j], stageName(s) + " is replicated on " + quote(devices[i]) + " and " +
                                           quote(devices[j]));
      for (int t : graph_of_stages_.succs[s])
        for (const std::string& a : devices)
          for (const std::string& b : plan_.stages[t].devices)
            need(a, b, stageName(s) + " feeds " + stageName(t));
    }
  }

  void checkMemory(const std::vector<int64_t>& given) const {
    const int p = plan_.numStages();
    if (!given.empty() && static_cast<int>(given.size()) != p)
      fail("memory check: got " + std::to_string(given.size()) + " per-stage memory figures for " +
           std::to_string(p) + " stages");
    std::vector<double> need(p, 0.0);
    const double scale = static_cast<double>(plan_.microbatch_size) / graph_.batchSize();
    for (int s = 0; s < p; ++s) {
      if (!given.empty()) {
        need[s] = static_cast<double>(given[s]);
        continue;
      }
      // Weights and their gradients, optimizer state, one micro-batch of activations.
      for (const std::string& name : plan_.stages[s].layers) {
        const graph::Layer& l = graph_.layer(graph_.indexOf(name));
        need[s] += 2.0 * l.param_bytes + l.optimizer_state_bytes + l.savedBytesAt(scale);
      }
    }
    for (int d = 0; d < cluster_.size(); ++d) {
      const auto& stages = device_stages_[d];
      if (stages.empty()) continue;
      // The framework's working memory is the process's, once per device (given figures
      // are the stages' alone), and on a CPU the heap keeps a share beside the tensors.
      double tensors = 0;
      for (int s : stages) tensors += need[s];
      const double total = static_cast<double>(graph_.processMemory().framework_bytes) + tensors +
                           graph::heapKeptBeside(tensors, cluster_.device(d).kind, graph_.processMemory().heap);
      const double has = static_cast<double>(cluster_.device(d).memory_bytes);
      if (total <= has) continue;
      std::string who = stageName(stages[0]) + " needs ";
      if (stages.size() > 1) {
        who = "stages";
        for (std::size_t i = 0; i < stages.size(); ++i)
          who += (i == 0 ? " " : i + 1 == stages.size() ? " and " : ", ") + std::to_string(stages[i]);
        who += " need together ";
      }
      fail(who + text::humanBytes(total) + " on device " + quote(cluster_.device(d).name) + " which has " +
           text::humanBytes(has));
    }
  }

  const Plan& plan_;
  const LayerGraph& graph_;
  const cluster::ClusterSpec& cluster_;
  const std::string& origin_;
  std::vector<int> stage_of_;                   // layer -> stage
  std::vector<std::vector<int>> device_stages_;  // device -> stages it runs
  StageGraph graph_of_stages_;
};

}  // namespace

void validate(const Plan& plan, const LayerGraph& graph, const cluster::ClusterSpec& cluster,
              const std::string& origin, const std::vector<int64_t>& stage_memory_bytes) {
  Validator(plan, graph, cluster, origin).run(stage_memory_bytes);
}

}  // namespace pipetrain::plan
