// What the planner decided for a run, and what it took: the record a launcher hands its
// ranks (job/rank_spec.h, a torchrun store) and keeps in the run's summary
// (train_summary.h) under "planner". One writer and one reader.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/planner/explore.h"
#include "pipetrain/report/report.h"
#include "pipetrain/sim/plan_traffic.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::report {

// Where the run's profile came from (job/run_profile.h): the cache, or measured for it.
struct ProfileSource {
  std::string path;             // the cached profile; "" where none was kept
  bool cached = false;          // found in the cache, not measured for this run
  double measured_seconds = 0;  // what measuring it took, then or now
  std::string measured;         // when a cached profile was measured
  int runs_merged = 0;          // runs whose measured times have sharpened it
  double seconds = 0;           // what getting it took this run
};

// Time to accuracy's calibration of the update rules (planner/time_to_target.h).
struct CalibrationRecord {
  std::string path;  // its cache file
  double seconds = 0;
  planner::CalibrationFigures figures;
};

// The prediction of the chosen plan from the profile, to set beside what the run measures.
struct ChosenPrediction {
  double throughput = 0;         // samples/s
  double iteration_seconds = 0;
  std::vector<double> rank_busy_seconds;  // each rank's compute per mini-batch, on the shared cores
  std::vector<double> rank_core_seconds;  // the same on a core of its own
  std::vector<int64_t> rank_peak_memory_bytes, rank_process_bytes;
  int process_memory_runs = 0;  // runs the profile's process memory was learned from
  double probe_seconds = 0;     // the profile's core pace (runtime/core_probe.h)
};

struct PlannerRecord {
  Table candidates;  // the ranked plans, the chosen one highlighted
  std::vector<std::string> notes;
  ProfileSource profile;
  double planning_seconds = 0;
  std::string objective;
  std::optional<CalibrationRecord> calibration;
  ChosenPrediction chosen;
  std::vector<sim::LinkTraffic> links;  // what the plan sends over each link per mini-batch
};

json_io::Json plannerRecordToJson(const PlannerRecord& record);
// Error naming `origin` and the field where one is missing or of the wrong type.
PlannerRecord plannerRecordFromJson(const json_io::JsonCursor& json);

json_io::Json profileSourceToJson(const ProfileSource& source);

}  // namespace pipetrain::report
