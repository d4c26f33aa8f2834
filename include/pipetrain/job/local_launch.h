// A training job's local ranks, from start to their results: started by the launcher
// (launcher.h), watched, restarted from the newest checkpoint after a failure (up to
// --max-restarts), continued on fewer ranks under a new plan when one is lost for good
// (--min-nproc), their results read back.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/job/plan_decision.h"
#include "pipetrain/job/rank_report.h"
#include "pipetrain/job/train_request.h"
#include "pipetrain/report/train_summary.h"

namespace pipetrain::job {

// What the ranks say while the job runs, as it happens.
struct LaunchWatch {
  std::function<void(const ProgressReport&)> progress;
  std::function<void(const std::string&)> line;     // any other line a rank printed
  // Why the job starts again, and from where (on fewer ranks, once restarts are spent).
  std::function<void(const std::string&)> restart;
  // The plan decided for the ranks left, and the planner's work where it planned it.
  std::function<void(const std::optional<LocalPlan>&)> replanned;
  Say say;  // what re-planning says as it goes
};

struct LaunchedRun {
  std::vector<runtime::RankResult> ranks;  // by rank
  double wall_seconds = 0;                 // from the first start, restarts, set-up and evaluation included
  // What happened to the job on the way, in order: restarts and shrinks.
  std::vector<report::RunEvent> events;
  // The network its ranks trained over, where the job measured it (a job across hosts:
  // job/host_network.h); without it, this machine's loopback (localCluster).
  std::optional<cluster::ClusterSpec> hosts;
};

// Runs request.ranks.nproc local ranks, each handed the job as a file (rank_spec.h). After a
// failure it restarts them, up to request.ranks.max_restarts times, from the newest
// checkpoint; once those are spent, where
// request.ranks.min_nproc allows and a checkpoint exists, it goes on with one rank fewer
// (request.ranks.nproc, config.plan and planning.record then describe the job that finished),
// the plan decided again for them (plan_decision.h, written to `plan_out`). Throws
// Error naming the failed rank, and saying how to resume, when it cannot go on.
LaunchedRun launchRanks(TrainRequest& request, const models::Model& model, std::string plan_out,
                        const LaunchWatch& watch);

}  // namespace pipetrain::job
