#include "pipetrain/planner/update_rule.h"

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

}  // namespace

UpdateRule updateRuleOf(const plan::Plan& plan, const graph::LayerGraph& graph) {
  UpdateRule rule;
  const int64_t batch = plan.samplesPerMinibatch();
  if (!schedule::isAsynchronous(plan.schedule.name)) {
    rule.key = "sync b" + std::to_string(batch);
    rule.description = "synchronous, a step per mini-batch of " + std::to_string(batch);
    rule.stage_delays.assign(plan.numStages(), 0);
    return rule;
  }
  rule.synchronous = false;
  const schedule::Program program =
      plan::programForPlan(plan, plan::stageDag(plan, graph), kSteadyMinibatches, plan::Check::kSkip);
  rule.stage_delays = schedule::stageDelays(program);
  // Which micro-batches a STEP combines: under PipeDream one per replica, else a
  // mini-batch (schedule::stepCombination).
  const schedule::StepCombination steps = schedule::stepCombination(program);
  std::vector<int> combined;
  for (const auto& per_version : steps.combined) combined.push_back(per_version.empty() ? 0 : per_version.begin()->second);
  const plan::ScheduleOptions& o = plan.schedule;
  rule.key = o.name + (o.vertical_sync ? "+vs" : "") + " b" + std::to_string(plan.microbatch_size) + "x" +
             std::to_string(plan.microbatches) + " combine " + joined(combined) + " delays " + joined(rule.stage_delays);
  if (program.backward_weights == schedule::BackwardWeights::kLatest) {
    rule.key += " t1=" + std::to_string(o.pipemare_lr_warmup) + " k=" + std::to_string(o.pipemare_warmup_steps) +
                " t2=" + std::to_string(o.pipemare_correction) + text::format(" d=%g", o.pipemare_decay);
  }
  rule.description = o.name + (o.vertical_sync ? " (vertical sync)" : "") + ": steps on " +
                     joined(combined) + " micro-batch(es) of " + std::to_string(plan.microbatch_size) +
                     ", stage delays " + joined(rule.stage_delays);
  return rule;
}

}  // namespace pipetrain::planner
