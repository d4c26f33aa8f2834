#include "pipetrain/plan/measured_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "pipetrain/graph/heap_share.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/stats.h"

namespace pipetrain::plan {
namespace {

using schedule::ActionType;

// What each of a stage's figures is multiplied by.
struct Factors {
  double forward = 1, input = 1, weight = 1, split_weight = 1, step = 1;
};

void scale(graph::PassSeconds& t, const Factors& f) {
  t.forward *= f.forward;
  t.backward_input *= f.input;
  t.backward_weight *= f.weight;
  t.split_weight *= f.split_weight;
  t.forward_no_grad *= f.forward;
}

// The mean seconds each stage's F, B, I and W of a steady mini-batch spend on weight
// versions (schedule::versionSeconds, at the profile's speed): a run's measured times
// hold them and the profile's passes do not, so they come off the measured times before
// these are compared with the profile; the cost model adds them back. Empty where the
// profile prices no versions.
StageSeconds versionSecondsPerAction(const graph::LayerGraph& profile, const Plan& plan) {
  std::vector<schedule::StageVersionCosts> costs;
  bool priced = false;
  for (const Stage& stage : plan.stages) {
    costs.push_back(stageVersionCosts(stage, profile));
    priced = priced || costs.back().priced();
  }
  if (!priced) return {};
  // The last mini-batch, past the first versions' transient.
  const int minibatches = plan.numStages() + 2;
  const schedule::Program program = programForPlan(plan, stageDag(plan, profile), minibatches, Check::kSkip);
  std::map<std::pair<int, ActionType>, std::pair<double, int>> sums;
  const std::vector<std::vector<schedule::VersionWork>> ranks =
      schedule::versionWork(program, plan.schedule.pipemare_correction);
  for (int r = 0; r < program.numRanks(); ++r) {
    const std::vector<schedule::VersionWork>& work = ranks[r];
    for (std::size_t i = 0; i < work.size(); ++i) {
      const schedule::Action& a = program.ranks[r][i];
      if (!schedule::isCompute(a.type) || a.microbatch / program.microbatches != minibatches - 1) continue;
      auto& [seconds, count] = sums[{a.stage, a.type}];
      seconds += schedule::versionSeconds(a.type, work[i], costs[a.stage]);
      ++count;
    }
  }
  StageSeconds out;
  for (const auto& [key, sum] : sums) out[key] = sum.first / sum.second;
  return out;
}

}  // namespace

SharpenedProfile sharpenProfile(const graph::LayerGraph& profile, const Plan& plan, const StageSeconds& measured,
                                int runs_merged, double measured_probe_seconds) {
  std::vector<graph::Layer> layers = profile.layers();
  std::string note;
  const bool plain_steps = !schedule::isAsynchronous(plan.schedule.name);
  for (int s = 0; s < plan.numStages(); ++s)
    for (const std::string& name : plan.stages[s].layers)
      if (profile.indexOf(name) < 0)
        throw Error("plan stage " + std::to_string(s) + " holds layer '" + name + "', which the profile does not have");
  const StageSeconds versions = versionSecondsPerAction(profile, plan);
  // What the run measured of its layers' compute in an action: its weight versions'
  // copies come off, and so does a backward action's call into autograd, which the
  // layers' figures are net of (graph::LayerGraph::backwardCallSeconds).
  const auto measuredOf = [&](int stage, ActionType type) {
    const auto it = measured.find({stage, type});
    if (it == measured.end()) return 0.0;
    const auto v = versions.find({stage, type});
    const double call = schedule::isBackward(type) ? profile.backwardCallSeconds() : 0.0;
    return std::max(0.0, it->second - (v == versions.end() ? 0.0 : v->second) - call);
  };
  const auto toward = [&](double seen, double profiled) {
    return seen > 0 && profiled > 0 ? std::pow(seen / profiled, 1.0 / (runs_merged + 1)) : 1.0;
  };
  for (int s = 0; s < plan.numStages(); ++s) {
    std::vector<int> members;
    graph::PassSeconds profiled;
    double step = 0;
    double recomputed = 0;  // what B (or I) runs first on a recomputing stage: its layers' forward pass again
    const std::vector<char> recomputes = plan::recomputedLayerMask(plan.stages[s], profile);
    for (const std::string& name : plan.stages[s].layers) {
      const int i = profile.indexOf(name);
      members.push_back(i);
      const graph::PassSeconds t = profile.secondsAt(i, plan.microbatch_size);
      // A recomputing layer's F ran without a graph, as the cost model prices it.
      profiled.forward += recomputes[i] ? t.forward_no_grad : t.forward;
      if (recomputes[i]) recomputed += t.forward;
      profiled.backward_input += t.backward_input;
      profiled.backward_weight += t.backward_weight;
      profiled.split_weight += t.split_weight;
      step += profile.layer(i).optimizer_seconds;
    }
    Factors f;
    f.forward = toward(measuredOf(s, ActionType::F), profiled.forward);
    f.input = f.weight = f.split_weight =
        toward(measuredOf(s, ActionType::B), recomputed + profiled.backward_input + profiled.backward_weight);
    if (measuredOf(s, ActionType::I) > 0) f.input = toward(measuredOf(s, ActionType::I), recomputed + profiled.backward_input);
    if (measuredOf(s, ActionType::W) > 0) f.split_weight = toward(measuredOf(s, ActionType::W), profiled.split_weight);
    // The profile times a plain optimizer step. An asynchronous rule's step does more
    // (2BW and PipeDream stash the weights it replaces, PipeMare keeps them for its
    // discrepancy correction): gpt's ran 1.1-2.1x its profile where a synchronous
    // schedule's ran 1.0x, and, learned, it priced the next 1F1B plan on the same
    // profile 17% slow (docs/predictions.md#the-runs-people-start).
    f.step = plain_steps ? toward(measuredOf(s, ActionType::STEP), step) : 1;
    for (int i : members) {
      graph::Layer& l = layers[i];
      // A split W never timed on its own is priced as the fused one (splitWeightSeconds);
      // measured, it gets a figure of its own.
      l.split_weight_seconds = l.splitWeightSeconds() * f.split_weight;
      l.forward_seconds *= f.forward;
      if (l.forward_no_grad_seconds >= 0) l.forward_no_grad_seconds *= f.forward;
      l.backward_input_seconds *= f.input;
      l.backward_weight_seconds *= f.weight;
      l.optimizer_seconds *= f.step;
      for (graph::TimedAtBatch& other : l.other_batches) scale(other.seconds, f);
    }
    char line[128];
    std::snprintf(line, sizeof line, "%sstage %d: F x%.2f, I x%.2f, W x%.2f, %s%.2f", s ? "; " : "", s, f.forward,
                  f.input, measuredOf(s, ActionType::W) > 0 ? f.split_weight : f.weight,
                  plain_steps ? "step x" : "step kept (not a plain optimizer step) x", f.step);
    note += line;
  }
  SharpenedProfile out{profile.withLayers(std::move(layers), "profile sharpened by a run"), note};
  graph::ProfiledAs how = profile.profiledAs();
  if (!measured.empty()) how.probe_seconds *= toward(measured_probe_seconds, how.probe_seconds);  // kept with the times
  out.graph.setProfiledAs(how);
  return out;
}

int64_t frameworkBytesOfRun(const std::vector<RankMemoryMeasured>& ranks, const std::string& heap) {
  if (ranks.empty()) return -1;
  std::vector<double> beyond;
  for (const RankMemoryMeasured& r : ranks)
    beyond.push_back(r.added - r.priced_tensors - graph::heapKeptBeside(r.priced_tensors, "cpu", heap) -
                     static_cast<double>(std::max<int64_t>(0, r.data)));
  return std::max<int64_t>(0, std::llround(util::median(beyond)));
}

graph::ProcessMemory learnProcessMemory(const graph::ProcessMemory& before, int64_t framework_bytes,
                                        int64_t data_bytes) {
  if (framework_bytes < 0)
    throw Error("a run's framework memory cannot be negative (" + std::to_string(framework_bytes) + " bytes)");
  graph::ProcessMemory after = before;
  after.runs = before.runs + 1;
  after.framework_bytes = before.framework_bytes + (framework_bytes - before.framework_bytes) / after.runs;
  if (data_bytes >= 0) after.data_bytes = data_bytes;
  return after;
}

graph::LearnedActionOverhead learnActionOverhead(const graph::LearnedActionOverhead& before, double seconds) {
  if (!(seconds >= 0)) throw Error("a run's runtime time per action cannot be negative (" + std::to_string(seconds) + " s)");
  return {(before.seconds * before.runs + seconds) / (before.runs + 1), before.runs + 1};
}

}  // namespace pipetrain::plan
