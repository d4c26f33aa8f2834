// `pipetrain train` with RANK in the environment: one rank, started by the launcher
// (train_command.cpp) or by hand or another launcher (torchrun conventions); and what the
// two sides share: the command's arguments, the rank's result as a JSON line, progress
// lines and where a run resumes from.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "train_plan.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/torch/calibration.h"
#include "pipetrain/graph/captured_model.h"
#include "pipetrain/torch/checkpoint.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::cli {

struct TrainArgs {
  runtime::TrainConfig config;
  PlanArgs plan_args;
  std::vector<std::string> model_options;  // key=value
  graph::CaptureRequest model_py;          // --model-py: Python source to capture into config.model_file
  std::string data_dir;
  std::string plan;
  std::string plan_out;
  bool no_replication = false;
  bool reprofile = false;
  bool allow_async = false;
  planner::Objective objective = planner::Objective::kThroughput;
  runtime::CalibrationBudget calibration;
  planner::Partitioner partitioner = planner::Partitioner::kAuto;
  int64_t rank_memory_bytes = 0;  // --rank-memory; 0 = physical memory / ranks
  int cores = 0;  // for all local ranks together; 0 = the machine's
  int nproc = 2;
  std::string wire = "auto";  // what carries the data between ranks: auto, gloo or nccl
  int timeout_seconds = 60;
  int max_restarts = 0;
  std::string trace, svg, summary_json, log_jsonl, report_dir;
  json_io::Json planner;  // the planner's ranked table, when it chose the plan
  std::vector<std::string> argv;
};

// A rank's result as the launcher reads it from its RESULT line (and the summary keeps).
json_io::Json resultToJson(const runtime::RankResult& r);

// "epoch 1  step 20/112  loss 0.3640  20513 samples/s  ETA 3 s": what a user reads.
std::string progressLine(int epoch, long long step, long long steps, double loss, double samples_per_second,
                         int64_t samples_per_step);
// Whether a plain (not a terminal's) progress line is due: every 10 s and at an epoch's end.
bool plainLineDue(long long step, long long steps, std::chrono::steady_clock::time_point& last);

// The checkpoint this run resumes from (runtime::checkpointToResume), said when `say`;
// leaves config.resume naming it, or empty.
std::optional<runtime::Checkpoint> resolveResume(runtime::TrainConfig& config, bool say);

// One rank: Gloo transport from the environment. Under the launcher it reports progress
// and its result in lines the launcher reads; started by hand (torchrun, Slurm), the
// reporting rank prints progress for people.
int runRank(TrainArgs& a);

}  // namespace pipetrain::cli
