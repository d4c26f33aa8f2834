// The layer profile a `train` run plans from: from the profile cache where an earlier
// run took it under the same key (graph/profile_cache.h), else measured now, by one
// `pipetrain profile` process per rank as the ranks will run, at sizes its cost allows,
// and kept in the cache for the next run. After the run, its measured stage times
// sharpen the cached profile (plan/measured_profile.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/job/console.h"
#include "pipetrain/job/plan_source.h"
#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/graph/profile_cache.h"
#include "pipetrain/plan/measured_profile.h"
#include "pipetrain/report/train_summary.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::job {

struct ProfileRequest {
  int ranks = 1;
  int blas_threads = 1;                   // each rank's share of the cores
  int cores = 1;                          // the cores all ranks share
  std::vector<std::string> model_options; // as given on the command line (KEY=VALUE)
  PlanArgs args;                          // the micro-batching, or the batch; schedule "" = the planner's
  int timeout_seconds = 60;               // a profiling process stopped this long ends the run
  bool reprofile = false;                 // measure again even where the cache holds it
};

struct RunProfile {
  graph::LayerGraph graph;
  // The cache entry the profile is kept in ("" when it could not be stored), and its key.
  std::string cached_path;
  graph::ProfileKey key;
  report::ProfileSource source;  // for the planner's record
};

// The profile, also written to `out` (a measured one is measured there).
RunProfile profileForRun(const runtime::TrainConfig& config, const models::Model& model, const ProfileRequest& request,
                         const std::string& out, const Say& say);

// What a run's ranks held beyond the tensors the planner priced (the median over its
// ranks on the host), and what their datasets added; -1 where not measured.
struct RunMemory {
  int64_t framework_bytes = -1;
  int64_t data_bytes = -1;
};

// From the ranks' entries in the run's summary and the planner's prediction of the plan
// they ran.
RunMemory runMemory(const std::vector<report::RankSummary>& ranks, const report::ChosenPrediction& chosen);

// What a run measured that the profile it was planned from learns.
struct RunLearning {
  plan::StageSeconds stage_seconds;  // none: the times stay
  double probe_seconds = 0;          // its slowest core's (RankResult::probe_seconds); <= 0: none
  RunMemory memory;
  // The runtime's own time per action, its ranks' mean (runtimeSecondsPerAction); < 0:
  // not learned (ranks that took turns on the cores, whose waits it would hold).
  double action_overhead = -1;
};

// The run's measures into the cached profile, which then prices the next plan; says on
// stdout what moved. Nothing where the profile is not in the cache.
void sharpenCachedProfile(const report::ProfileSource& profile, const plan::Plan& plan, const RunLearning& run,
                          const Say& say);

}  // namespace pipetrain::job
