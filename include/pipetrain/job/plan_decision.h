// The one plan a training job runs, decided once from whichever source the request
// names (plan_source.h): a plan file, hand-given stage bounds or data parallelism, the
// checkpoint's own plan when a run resumes as it ran, or the planner's choice for the
// local ranks (local_plan.h). The launcher writes it to a file (kept where --plan-out
// says) and hands it to every rank in its job (rank_spec.h).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "pipetrain/job/console.h"
#include "pipetrain/job/local_plan.h"
#include "pipetrain/job/train_request.h"
#include "pipetrain/torch/checkpoint.h"

namespace pipetrain::job {

struct PlanChoice {
  // Where the request's plan comes from when none is given: the checkpoint it resumes
  // (the same ranks, and nothing asked of the planner), else the planner.
  const runtime::Checkpoint* resumed = nullptr;
  bool replanning_asked = false;  // options that steer the planner were given
  std::string out;                // where the plan is written for the ranks
  // A job across hosts: the network between them, measured (or taken from the cache)
  // only where the planner is needed. Empty: the ranks are this machine's.
  std::function<cluster::ClusterSpec()> hosts_network;
};

// Decides request.config.plan (and request.planning.record when the planner chose), writes it to
// choice.out and points request.planning.plan_file at the file. Returns the planner's work when it
// chose, for the caller to show. Throws Error when the plan does not fit the model, the
// job or the checkpoint.
std::optional<LocalPlan> decidePlan(TrainRequest& request, const models::Model& model, const PlanChoice& choice,
                                    const Say& say);

// Whether the request gives its plan: a plan file, stage bounds or data parallelism.
bool planGiven(const TrainRequest& request);

// A rank's plan: the file its launcher wrote, or hand-given stage bounds or data
// parallelism for `world_size` ranks; a rank without one is refused.
plan::Plan planOfRank(const TrainRequest& request, int world_size);

}  // namespace pipetrain::job
