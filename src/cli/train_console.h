// What `pipetrain train` prints while a job runs and when it ends: progress, the
// planner's choice, and the run's summary.
#pragma once

#include <chrono>
#include <string>

#include "pipetrain/job/local_plan.h"
#include "pipetrain/job/rank_report.h"
#include "pipetrain/job/run_summary.h"

namespace pipetrain::cli {

// Progress on the console: rewritten in place on a terminal where `in_place`, else a
// line every 10 s and at each epoch's end.
class ProgressDisplay {
 public:
  ProgressDisplay(int64_t samples_per_step, bool in_place);
  ~ProgressDisplay();  // ends the terminal's line
  void show(const job::ProgressReport& p);
  void endLine();  // before other output: a line rewritten in place ends first

 private:
  int64_t samples_per_step_;
  bool in_place_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_plain_;
};

// "planned for 2 local ranks in 0.02 s:", the ranked table, where the plan went (""
// where it is not kept: --plan-out keeps it) and the profile it came from.
void printPlanned(const job::LocalPlan& planned, int rank_count, const std::string& plan_path);

// The run's summary: throughput, notes, the test figures, a line per rank, memory notes
// and the files written.
void printRunSummary(const job::TrainRequest& request, const job::RunSummary& summary);

// A rank started by hand that trained a plan given to it: its own result.
void printRankResult(const runtime::RankResult& result);

}  // namespace pipetrain::cli
