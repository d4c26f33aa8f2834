// A training job's local ranks, from start to their results: started by the launcher
// (launcher.h), watched, restarted from the newest checkpoint after a failure (up to
// --max-restarts), their results read back.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "pipetrain/job/rank_report.h"
#include "pipetrain/job/train_request.h"

namespace pipetrain::job {

// What the ranks say while the job runs, as it happens.
struct LaunchWatch {
  std::function<void(const ProgressReport&)> progress;
  std::function<void(const std::string&)> line;     // any other line a rank printed
  std::function<void(const std::string&)> restart;  // why the job starts again, and from where
};

struct LaunchedRun {
  std::vector<runtime::RankResult> ranks;  // by rank
  double wall_seconds = 0;                 // from the first start, restarts, set-up and evaluation included
};

// Runs request.argv as request.nproc local ranks. Throws Error naming the failed rank,
// and saying how to resume, once the restarts are spent.
LaunchedRun launchRanks(const TrainRequest& request, const LaunchWatch& watch);

}  // namespace pipetrain::job
