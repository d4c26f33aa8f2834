// A run's measured stage times back into the layer profile it was planned from, so that
// the next plan is priced from what the run really did (the executor's own work per
// action, the caches as a pipeline's rank leaves them) rather than from the profile
// alone. `train` does this to the profile cache's entry after each run
// (graph/profile_cache.h).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/plan/plan.h"
#include "pipetrain/schedule/action.h"

namespace pipetrain::plan {

// Mean seconds per micro-batch of each stage's compute actions (F, B, I, W) and per
// mini-batch of its STEP, as the run measured them.
using StageSeconds = std::map<std::pair<int, schedule::ActionType>, double>;

struct SharpenedProfile {
  graph::LayerGraph graph;
  std::string note;  // what moved, for the log: "stage 0 F x1.12, B x1.31; ..."
};

// `profile` with each stage's layers scaled so that the stage's forward, backward
// (whole, or I and W apart), and optimizer step at the plan's micro-batch size come to
// the measured times' geometric mean with the `runs_merged` runs merged before: each
// figure moves by (measured / profiled)^(1 / (runs_merged + 1)), every layer of the
// stage and every batch size it was timed at by the same factor. A stage's figure that
// either side lacks (0, or not measured) stays as it was, and so does the optimizer step
// under an asynchronous schedule, whose step does more than the plain one profiled.
// The speed those times hold at moves alike: the profile's probe_seconds toward the
// run's slowest core's `measured_probe_seconds` (torch/runtime/core_probe.h; <= 0: kept).
// Throws Error when the plan names a layer the profile does not have.
SharpenedProfile sharpenProfile(const graph::LayerGraph& profile, const Plan& plan, const StageSeconds& measured,
                                int runs_merged, double measured_probe_seconds = 0);

// One rank of a run, on the host: what training added to its process at its peak, the
// tensors the planner priced for it, and what opening its datasets added (-1: none).
struct RankMemoryMeasured {
  double added = 0;
  double priced_tensors = 0;
  int64_t data = -1;
};
// The framework's working memory a run shows: the median over its ranks of what each
// held beyond its priced tensors, the share of them their heap keeps (`heap`, as
// util::heapName names it; graph::heapKeptBeside: the ranks are CPU ones, as only their
// resident set holds their tensors) and its data, at least 0; -1 for no ranks.
int64_t frameworkBytesOfRun(const std::vector<RankMemoryMeasured>& ranks, const std::string& heap);

// A run's memory into the profile's: `framework_bytes` (what the run's ranks held beyond
// the tensors the accounting priced and their datasets) is averaged with the `runs` runs
// before it; `data_bytes`, where the run's ranks loaded data (>= 0), is what opening it
// added there, else it stays. Throws Error for a negative framework figure.
graph::ProcessMemory learnProcessMemory(const graph::ProcessMemory& before, int64_t framework_bytes,
                                        int64_t data_bytes);

// A run's runtime time per action (job::runtimeSecondsPerAction, its ranks' mean) into
// the profile's: averaged with the runs before it. Throws Error for a negative figure.
graph::LearnedActionOverhead learnActionOverhead(const graph::LearnedActionOverhead& before, double seconds);

}  // namespace pipetrain::plan
