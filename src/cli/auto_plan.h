// `pipetrain train` without --plan or --stage-bounds on local ranks: profile the model
// at the run's micro-batch size as a rank would run it (or take the profile from the
// profile cache, graph/profile_cache.h, where an earlier run took it under the same
// key), plan it for this machine's ranks with the planner (every rank used), print the
// ranked table, write the plan.
#pragma once

#include <string>
#include <vector>

#include "train_plan.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/torch/trainer.h"

namespace pipetrain::cli {

struct AutoPlanRequest {
  int ranks = 1;
  int blas_threads = 1;                   // each rank's share of the cores
  int cores = 1;                          // the cores all ranks share
  std::vector<std::string> model_options; // as given on the command line (KEY=VALUE)
  PlanArgs args;                          // micro-batching; schedule name "" = the planner chooses
  bool allow_replication = true;
  bool allow_async = false;               // the planner may choose pipedream, 2bw, pipemare
  planner::Partitioner partitioner = planner::Partitioner::kAuto;
  std::string out;                        // where the plan is written
  int timeout_seconds = 60;               // a profiling process stopped this long ends the run
  bool reprofile = false;                 // measure again even where the profile cache has this profile
};

struct LocalPlan {
  plan::Plan plan;             // with the requested schedule options applied
  json_io::Json planner;       // the ranked table and its notes, for the report (report_pages.h)
};

// Where planLocalRun keeps the profile behind the plan written to `plan_path`.
std::string profilePath(const std::string& plan_path);

// Returns the chosen plan, also written to `request.out`. Throws Error when profiling
// fails or no plan fits (with the planner's reasons).
LocalPlan planLocalRun(const runtime::TrainConfig& config, const AutoPlanRequest& request);

}  // namespace pipetrain::cli
