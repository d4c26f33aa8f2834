// A finished training run, summed up: what `train --summary-json` writes, the report and
// the console read (docs/report.md), "format": "pipetrain.train-summary". One writer and
// one reader; job/run_summary.h fills it from the ranks' results.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/plan/plan.h"
#include "pipetrain/recipe/recipe.h"
#include "pipetrain/report/planner_record.h"
#include "pipetrain/trace/timeline.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::report {

// A stage's kind of action (F, B, I, W, STEP, ALLREDUCE), its mean over the run's steady
// state: of wall time, and of the thread's time on a core.
struct ActionTime {
  int stage = 0;
  std::string type;
  double seconds = 0, cpu_seconds = 0;
};

// One evaluation, after an epoch; -1: none (a loss without classes has no accuracy).
struct Evaluation {
  int epoch = 0;
  int64_t samples = 0;
  double train_seconds = 0, wall_seconds = 0;
  double test_accuracy = -1, test_loss = -1;
};

// Where a rank's step went, its memory and weights, beside what the simulator predicted
// from the run's own action times (and the planner from the profile, for memory).
struct RankSummary {
  int rank = 0;
  std::vector<int> stages;
  double bubble_fraction = 0;     // not computing
  double wait_fraction = 0;       // waiting for messages
  double allreduce_fraction = 0;
  double overhead_fraction = 0;   // the framework's: neither compute, waiting nor all-reducing
  double framework_seconds_per_action = 0;
  double core_wait_fraction = -1; // lost to other processes on the same cores; -1 = unknown
  double core_run_fraction = -1;  // the training thread's time on a core; -1 = unknown
  double probe_seconds = 0;       // the core's pace (runtime/core_probe.h)
  int64_t peak_memory_bytes = 0, start_memory_bytes = 0;
  int64_t data_memory_bytes = -1, heap_free_bytes = -1;  // -1 = unknown
  std::string device, data_channel, heap;
  int64_t peak_device_memory_bytes = -1;  // a GPU's allocator peak; -1 on a CPU
  int weight_versions = 0;
  int64_t weight_bytes = 0;
  std::vector<ActionTime> action_seconds;
  double predicted_bubble_fraction = 0;
  int predicted_weight_versions = 0;
  std::optional<int64_t> predicted_peak_memory_bytes, predicted_process_bytes;  // where the planner priced memory

  // What training added to the process at its peak: the peak resident set less the one
  // before the model was built (LibTorch's own ~170 MiB left out).
  double memoryAddedByTraining() const { return static_cast<double>(peak_memory_bytes - start_memory_bytes); }
};

// A restart, or the job going on with fewer ranks (job/local_launch.h).
struct RunEvent {
  double seconds = 0;  // since the launch
  std::string event;   // "restart" or "shrink"
  int ranks = 0;       // the ranks it went on with
  std::string checkpoint, why;
};

struct TrainSummary {
  std::string model, schedule;
  bool asynchronous = false;
  int world_size = 0;
  double final_loss = 0, throughput = 0, wall_seconds = 0;
  int64_t samples = 0;
  std::vector<RankSummary> ranks;
  std::vector<Evaluation> history;
  double predicted_throughput = 0;  // the simulator's, from the run's measured action times
  std::string plan_file;
  plan::Plan plan;
  trace::Timeline measured_timeline, predicted_timeline;
  std::optional<PlannerRecord> planner;  // where the planner chose the plan
  std::vector<RunEvent> events;
  recipe::Recipe recipe;
  std::vector<double> grad_norms;   // per mini-batch, when clipping
  std::optional<double> test_accuracy, test_loss;
};

json_io::Json trainSummaryToJson(const TrainSummary& summary);
// Error naming `origin` and the field where one is missing or of the wrong type, or where
// the file is not a run summary.
TrainSummary trainSummaryFromJson(const json_io::Json& json, const std::string& origin);

json_io::Json evaluationToJson(const Evaluation& e);
json_io::Json actionTimesToJson(const std::vector<ActionTime>& times);

}  // namespace pipetrain::report
