#include "pipetrain/planner/update_rule.h"

#include <algorithm>
#include <numeric>

#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/staleness.h"
#include "pipetrain/util/text.h"

namespace pipetrain::planner {
namespace {

std::string joined(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

// Mini-batches enough for every stage to reach its steady delay: the deepest stage
// reads weights up to a few mini-batches old under PipeMare with few micro-batches.
constexpr int kSteadyMinibatches = 4;

// The plan whose Program the rule is read off (over kSteadyMinibatches). A schedule that steps
// after every round of one micro-batch per replica (PipeDream) never flushes and never
// looks at mini-batch boundaries, so its rule does not depend on how the micro-batches
// group into mini-batches: mini-batches of m' micro-batches (a multiple of every replica
// count), over as many micro-batches as fill the pipeline several times, give the same
// delays and combinations as the plan's own m at a fraction of the Program (PipeDream on
// 12 stages of 8 replicas at 8,192 micro-batches of one: 220 ms a rule otherwise).
// `ShortenedProgramGivesTheFullRule` in the tests holds the two equal.
plan::Plan ruleProgramShape(const plan::Plan& plan) {
  if (schedule::traits(plan.schedule.name).step_rule != schedule::StepRule::kPerMicrobatch) return plan;
  const std::vector<int> replicas = plan::stageReplicas(plan);
  int64_t round = 1, ranks = 0;
  for (int c : replicas) {
    round = std::lcm(round, static_cast<int64_t>(c));
    ranks += c;
    if (round > plan.microbatches) return plan;
  }
  // Micro-batches in flight never exceed the ranks' warm-ups, so kSteadyMinibatches x 2
  // x ranks of them pass the transient several times over.
  const int64_t shortened = round * ((2 * ranks + round - 1) / round);
  if (shortened >= plan.microbatches) return plan;
  plan::Plan copy = plan;
  copy.microbatches = static_cast<int>(shortened);
  return copy;
}

}  // namespace

UpdateRule updateRuleOf(const plan::Plan& plan, const graph::LayerGraph& graph) {
  UpdateRule rule;
  const int64_t batch = plan.samplesPerMinibatch();
  const std::string sync_key = "sync b" + std::to_string(batch);
  rule.key = sync_key;
  rule.description = "synchronous, a step per mini-batch of " + std::to_string(batch);
  rule.stage_delays.assign(plan.numStages(), 0);
  rule.samples_per_step = batch;
  if (!schedule::isAsynchronous(plan.schedule.name)) return rule;
  const plan::Plan shape = ruleProgramShape(plan);
  const schedule::Program program =
      plan::programForPlan(shape, plan::stageDag(shape, graph), kSteadyMinibatches, plan::Check::kSkip);
  // A micro-batch's gradient is delay steps stale where the step that applies it makes
  // version v + delay + 1 from the version v its forward pass read.
  const schedule::StepCombination steps = schedule::stepCombination(program);
  for (const auto& actions : program.ranks)
    for (const schedule::Action& a : actions) {
      if (a.type != schedule::ActionType::F) continue;
      const int applied = steps.step_of[a.stage][a.microbatch];
      if (applied >= 0) rule.stage_delays[a.stage] = std::max(rule.stage_delays[a.stage], applied - 1 - a.version);
    }
  // Which micro-batches a STEP combines: under PipeDream one per replica, else a mini-batch.
  std::vector<int> combined;
  bool whole_minibatches = true;
  for (const auto& per_version : steps.combined) {
    combined.push_back(per_version.empty() ? 0 : per_version.begin()->second);
    whole_minibatches = whole_minibatches && combined.back() == shape.microbatches;
    if (combined.back() > 0) rule.samples_per_step = std::min(rule.samples_per_step, combined.back() * plan.microbatch_size);
  }
  const bool fresh = std::all_of(rule.stage_delays.begin(), rule.stage_delays.end(), [](int d) { return d == 0; });
  // Without staleness, stepping on whole mini-batches, an asynchronous schedule trains
  // as synchronous SGD does (PipeDream on one replicated stage, PipeMare on one stage).
  if (fresh && whole_minibatches) return rule;
  rule.synchronous = false;
  const plan::ScheduleOptions& o = plan.schedule;
  rule.key = o.name + (o.vertical_sync ? "+vs" : "") + " b" + std::to_string(plan.microbatch_size) + "x" +
             std::to_string(plan.microbatches) + " combine " + joined(combined) + " delays " + joined(rule.stage_delays);
  rule.description = o.name + (o.vertical_sync ? " (vertical sync)" : "") + ": steps on " + joined(combined) +
                     " micro-batch(es) of " + std::to_string(plan.microbatch_size) + ", gradients " +
                     joined(rule.stage_delays) + " step(s) stale by stage";
  if (program.backward_weights == schedule::BackwardWeights::kLatest) {
    rule.key += " t1=" + std::to_string(o.pipemare_lr_warmup) + " k=" + std::to_string(o.pipemare_warmup_steps) +
                " t2=" + std::to_string(o.pipemare_correction) + text::format(" d=%g", o.pipemare_decay);
    rule.description += std::string(o.pipemare_lr_warmup ? ", T1" : "") + (o.pipemare_correction ? ", T2" : "");
  }
  return rule;
}

const UpdateRule& UpdateRules::of(const plan::Plan& plan) {
  const plan::ScheduleOptions& o = plan.schedule;
  std::string shape = o.name + "/" + std::to_string(o.chunks) + "/" + std::to_string(o.vertical_sync) + "/" +
                      std::to_string(o.pipemare_lr_warmup) + "/" + std::to_string(o.pipemare_warmup_steps) + "/" +
                      std::to_string(o.pipemare_correction) + text::format("/%.17g", o.pipemare_decay) + "/b" +
                      std::to_string(plan.microbatch_size) + "x" + std::to_string(plan.microbatches) + "/r" +
                      joined(plan::stageReplicas(plan));
  if (schedule::isAsynchronous(o.name))  // a synchronous rule does not depend on the DAG
    for (const std::vector<int>& preds : plan::stageDag(plan, graph_).preds) shape += "/" + joined(preds);
  auto it = by_shape_.find(shape);
  if (it == by_shape_.end()) it = by_shape_.emplace(shape, updateRuleOf(plan, graph_)).first;
  return it->second;
}

}  // namespace pipetrain::planner
