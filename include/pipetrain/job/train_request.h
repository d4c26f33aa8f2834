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

struct TrainRequest {
  runtime::TrainConfig config;
  PlanArgs plan_args;
  std::vector<std::string> model_options;  // key=value
  graph::CaptureRequest model_py;          // --model-py: Python source to capture into config.model_file
  std::string data_dir;
  std::string plan;      // a plan file; the launcher's own choice reaches its ranks this way too
  std::string plan_out;  // where to keep the plan the planner chooses
  bool no_replication = false;
  bool reprofile = false;
  bool allow_async = false;
  const planner::PlanObjective* objective = &planner::throughputObjective();
  runtime::CalibrationBudget calibration;
  planner::Partitioner partitioner = planner::Partitioner::kAuto;
  int64_t rank_memory_bytes = 0;  // 0 = physical memory / ranks
  int cores = 0;                  // for all local ranks together; 0 = the machine's
  int nproc = 2;
  int local_ranks = 0;            // the ranks on this host (a job across hosts); 0 = nproc
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
  // Outputs: the measured Chrome trace and Gantt chart, the summary, the metrics log
  // (written by the reporting rank) and the report's folder.
  std::string trace, svg, summary_json, log_jsonl, report_dir;
  std::optional<report::PlannerRecord> planner;  // where the planner chose the plan

  // The cores the local ranks share, each rank's BLAS threads (its share of them, or
  // config.threads where set), and how many ranks those cores run at once.
  int localCores() const;
  int blasThreadsPerRank() const;
  int concurrentRanks() const { return localCores() / blasThreadsPerRank(); }
};

}  // namespace pipetrain::job
