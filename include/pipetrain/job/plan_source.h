// Where a training run's Plan comes from. Every path ends in one plan::Plan that the
// launcher writes to a file and every rank loads: a plan file (`--plan`), hand-given
// stage bounds (`--stage-bounds`), plain data parallelism (`--data-parallel`), or the
// planner's choice for the local ranks (local_plan.h); plan_decision.h chooses among them.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/plan/plan.h"
#include "pipetrain/planner/chain_partition.h"
#include "pipetrain/torch/trainer.h"

namespace pipetrain::job {

struct PlanArgs {
  plan::ScheduleOptions schedule = [] {
    plan::ScheduleOptions none;
    none.name.clear();  // "" = not given
    return none;
  }();
  int microbatches = 8;
  int64_t microbatch_size = 32;
  int64_t batch = 0;               // > 0: samples per step, micro-batching the planner's choice
  std::vector<int> stage_bounds;   // layer boundaries, stages + 1
  bool data_parallel = false;      // one stage on every rank
  // kFull: every stage of a hand-made plan recomputes (plan::Stage::recompute); the
  // planner's policy otherwise.
  planner::Recompute recompute = planner::Recompute::kAuto;
};

// The plan that --stage-bounds or --data-parallel describe for `world_size` ranks (1f1b
// unless a schedule is given). Throws Error when the numbers do not fit the model or
// the job. `model` is the config's (runtime::openModel).
plan::Plan planFromArgs(const models::Model& model, const PlanArgs& args, int world_size);

// The plan the launcher chose, for the ranks: PlanArgs' schedule options (vertical sync,
// PipeMare's) laid over the chosen plan's schedule when it is the one they name, or when
// no schedule was named.
void applyScheduleOptions(const plan::ScheduleOptions& given, plan::Plan& plan);

}  // namespace pipetrain::job
