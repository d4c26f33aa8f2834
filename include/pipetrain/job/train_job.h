// `train`'s job, from a request whose options are parsed and checked to what it trained.
// One entry whichever part of the job this process is: the launcher (RANK unset: it
// decides the plan, starts the local ranks and sums up their run), a rank of a torchrun
// job or one of several started by hand with no plan given (rank 0 decides the plan for
// every rank and sums up), or a rank that trains a plan it was given (by its launcher,
// or by its own options). What happens on the way goes to the caller's watch; the caller
// prints it.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "pipetrain/job/console.h"
#include "pipetrain/job/local_launch.h"
#include "pipetrain/job/local_plan.h"
#include "pipetrain/job/run_summary.h"
#include "pipetrain/job/train_request.h"

namespace pipetrain::job {

// What the request's values alone do not say: which choices the user made.
struct TrainAsked {
  bool nproc = false;  // the rank count was chosen, not left to a resumed checkpoint
  bool batch = false;  // the mini-batch was chosen (replanning, unless it is the checkpoint's own)
  // Another choice that steers the planner (a schedule, micro-batching, recomputation,
  // rank memory): a resumed run is planned afresh rather than run under its own plan.
  bool replanning = false;
};

// What the job says as it runs.
struct TrainWatch {
  Say say;
  // The planner's choice, with the file the plan is kept in ("" where it is not kept).
  std::function<void(const LocalPlan& planned, int ranks, const std::string& kept)> planned;
  // The launcher's ranks: their progress and lines, and why they start again.
  std::function<void(const ProgressReport&)> progress;
  std::function<void(const std::string&)> line;
  std::function<void(const std::string&)> restart;
  // This process's own rank, where it trains: the reporting rank's progress (on ranks
  // its launcher started, the launcher reads it instead).
  std::function<void(const runtime::Progress&)> rank_progress;
};

// What this process's part of the job gave.
struct TrainOutcome {
  // The run, where this process sums it up: the launcher, or rank 0 of a torchrun job.
  std::optional<RunSummary> summary;
  // This rank's own result, where nobody else sums it up: a rank started by hand that
  // trains the plan its options give.
  std::optional<runtime::RankResult> rank;
};

// Runs this process's part of `request`'s job. The model and data in the request are
// resolved (a --model-py capture done, defaults applied) and its options checked
// against each other; everything else is checked here, before any long work. Throws
// Error saying what and where when the job cannot run or a rank fails for good.
TrainOutcome train(TrainRequest& request, const TrainAsked& asked, const TrainWatch& watch);

}  // namespace pipetrain::job
