#include "pipetrain/job/plan_source.h"

#include "pipetrain/plan/plan_program.h"
#include "pipetrain/util/error.h"

namespace pipetrain::job {

namespace {

plan::Plan handMadePlan(const models::Model& model, const PlanArgs& args, int world_size) {
  std::vector<std::string> layers;
  for (const auto& l : model.layers) layers.push_back(l.name);
  plan::ScheduleOptions schedule = args.schedule;
  if (schedule.name.empty()) schedule.name = "1f1b";
  if (args.data_parallel) {
    if (!args.stage_bounds.empty()) throw Error("--data-parallel and --stage-bounds describe different plans; give one");
    return plan::chainPlan(layers, {0, static_cast<int>(layers.size())}, {world_size}, schedule, args.microbatch_size,
                           args.microbatches);
  }
  if (args.stage_bounds.size() < 2) throw Error("--stage-bounds needs at least two boundaries (e.g. 0,4,8)");
  const int stages = static_cast<int>(args.stage_bounds.size()) - 1;
  const int ranks = stages / schedule::stagesPerRank(schedule::traits(schedule.name), std::max(1, schedule.chunks));
  if (ranks != world_size)
    throw Error("--stage-bounds gives " + std::to_string(stages) + " stages, which need " + std::to_string(ranks) +
                " ranks under " + schedule.name + ", but the job has " + std::to_string(world_size));
  return plan::chainPlan(layers, args.stage_bounds, {}, schedule, args.microbatch_size, args.microbatches);
}

}  // namespace

plan::Plan planFromArgs(const models::Model& model, const PlanArgs& args, int world_size) {
  plan::Plan plan = handMadePlan(model, args, world_size);
  for (plan::Stage& s : plan.stages) s.recompute = args.recompute == planner::Recompute::kFull;
  return plan;
}

void applyScheduleOptions(const plan::ScheduleOptions& given, plan::Plan& plan) {
  if (!given.name.empty() && given.name != plan.schedule.name) return;
  const std::string name = plan.schedule.name;
  const int chunks = plan.schedule.chunks;
  plan.schedule = given;
  plan.schedule.name = name;
  plan.schedule.chunks = chunks;
  // Vertical sync belongs to a schedule that steps per micro-batch; the planner may have
  // chosen another when none was named.
  if (schedule::traits(name).step_rule != schedule::StepRule::kPerMicrobatch) plan.schedule.vertical_sync = false;
}

}  // namespace pipetrain::job
