// A training job without a plan on local ranks: profile the model at the run's
// micro-batch size as a rank would run it (or take the profile from the profile cache,
// graph/profile_cache.h, where an earlier run took it under the same key), plan it for
// this machine's ranks with the planner (every rank used), or for the hosts' network a
// job across hosts measured, write the plan.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/job/console.h"
#include "pipetrain/job/run_profile.h"
#include "pipetrain/job/plan_source.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/torch/calibration.h"
#include "pipetrain/torch/trainer.h"

namespace pipetrain::job {

struct AutoPlanRequest {
  ProfileRequest profile;                 // the ranks, their micro-batching and how to profile them
  bool allow_replication = true;
  bool allow_async = false;               // the planner may choose pipedream, 2bw, pipemare
  planner::Partitioner partitioner = planner::Partitioner::kAuto;
  planner::Recompute recompute = planner::Recompute::kAuto;
  int64_t rank_memory_bytes = 0;          // the memory each rank is planned with; 0 = physical memory / ranks
  std::string out;                        // where the plan is written
  std::string wire = "auto";              // what will carry the data (train's --wire): prices the all-reduces
  // What the planner ranks by (planner/objective.h). An objective that needs calibration
  // (time to accuracy) has its update rules calibrated on the model and data
  // (runtime/calibration.h), the calibration cached beside the profile.
  const planner::PlanObjective* objective = &planner::throughputObjective();
  runtime::CalibrationBudget calibration;
  // A job across hosts: the network measured between them (host_network.h), which the
  // ranks are planned on (clusterOfHosts) instead of as this machine's. Null: one host.
  const cluster::ClusterSpec* hosts = nullptr;
};

struct LocalPlan {
  plan::Plan plan;             // with the requested schedule options applied
  report::PlannerRecord planner;  // the ranked table, its notes, what planning took, the prediction
  planner::Exploration exploration;  // what the planner ranked, for the console
  std::string profile_path;          // the profile planned from (the cache's entry where kept)
};

// Where planLocalRun keeps the profile behind the plan written to `plan_path`.
std::string profilePath(const std::string& plan_path);
// Where it keeps the calibration beside a profile.
std::string calibrationPath(const std::string& profile_path);

// Returns the chosen plan, also written to `request.out`. Throws Error when profiling
// fails or no plan fits (with the planner's reasons).
// `model` is the config's (runtime::openModel).
LocalPlan planLocalRun(const runtime::TrainConfig& config, const models::Model& model, const AutoPlanRequest& request,
                       const Say& say);

}  // namespace pipetrain::job
