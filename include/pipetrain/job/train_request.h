// A training job as asked for, whoever asks (the CLI's flags, a launched rank's job file,
// rank_spec.h): the run, where its plan comes from, its ranks and what it writes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pipetrain/graph/captured_model.h"
#include "pipetrain/job/plan_source.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/report/planner_record.h"
#include "pipetrain/torch/calibration.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::job {

// Where the model and its data come from, beyond the config's names and files.
struct ModelSource {
  std::vector<std::string> model_options;  // key=value
  graph::CaptureRequest model_py;          // --model-py: Python source to capture into config.model_file
  std::string data_dir;
};

// Where the plan comes from: a file, the arguments of a hand-made plan, or the planner
// (with its objective, budget and limits), and the record of the planner's choice.
struct PlanSource {
  PlanArgs args;
  std::string plan_file;  // a plan file; the launcher's own choice reaches its ranks this way too
  std::string plan_out;   // where to keep the plan the planner chooses
  bool no_replication = false;
  bool reprofile = false;
  bool allow_async = false;
  const planner::PlanObjective* objective = &planner::throughputObjective();
  runtime::CalibrationBudget calibration;
  planner::Partitioner partitioner = planner::Partitioner::kAuto;
  int64_t rank_memory_bytes = 0;  // 0 = physical memory / ranks
  std::optional<report::PlannerRecord> record;  // where the planner chose the plan
};

// How the ranks start and run: how many, on which cores, over what, for how long, and
// what happens when one fails.
struct RankLayout {
  int cores = 0;  // for all local ranks together; 0 = the machine's
  int nproc = 2;
  int local_ranks = 0;  // the ranks on this host (a job across hosts); 0 = nproc
  // This process's rank in the plan, where it is not its RANK (a job across hosts runs
  // each stage on the host it was priced on: job::planRanksOfJobRanks); -1: RANK.
  int plan_rank = -1;
  std::string wire = "auto";  // what carries the data between ranks: auto, gloo, shm or nccl
  int timeout_seconds = 60;
  int max_restarts = 0;
  // Elastic (> 0): when a rank is lost for good (it failed again once the restarts were
  // spent), the job goes on with one rank fewer, down to this many, re-planned for them
  // and resumed from the newest checkpoint.
  int min_nproc = 0;
};

// What the run writes besides its checkpoints (config.checkpoint_dir): the measured
// Chrome trace and Gantt chart, the summary, the metrics log (written by the reporting
// rank) and the report's folder.
struct RunOutputs {
  std::string trace, svg, summary_json, log_jsonl, report_dir;
};

// The job in its parts: what to train (the config each rank runs, and where its model
// comes from), where the plan comes from, how the ranks run, and what is written.
struct TrainRequest {
  runtime::TrainConfig config;
  ModelSource source;
  PlanSource planning;
  RankLayout ranks;
  RunOutputs outputs;

  // The cores the local ranks share, each rank's BLAS threads (its share of them, or
  // config.threads where set), and how many ranks those cores run at once.
  int localCores() const;
  int blasThreadsPerRank() const;
  int concurrentRanks() const { return localCores() / blasThreadsPerRank(); }
};

}  // namespace pipetrain::job
