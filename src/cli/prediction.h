// The simulator's prediction for a run that just happened: the plan that ran, with each
// stage priced at its measured compute times (means over the run's steady state) and
// this machine's loopback Gloo, fed through the same Program. Side by side with the
// measured bubbles it separates what the schedule costs from what communication and the
// framework add.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pipetrain/plan/plan.h"
#include "pipetrain/sim/evaluate.h"
#include "pipetrain/schedule/action.h"

namespace pipetrain::cli {

// This machine's ranks as a cluster: CPU devices with these names that share loopback
// Gloo (bandwidth and latency as measured on these machines, docs/runtime.md), each
// with `memory_bytes`. `concurrent_ranks`: how many ranks the cores run at once at full
// speed (cores / each rank's threads); more ranks than that share the cores.
cluster::ClusterSpec localCluster(const std::vector<std::string>& device_names, int64_t memory_bytes,
                                  int concurrent_ranks);
// The same with `ranks` devices named dev0, dev1, ... (plan::chainPlan's names).
cluster::ClusterSpec localCluster(int ranks, int64_t memory_bytes, int concurrent_ranks);

struct MeasuredRun {
  const plan::Plan* plan = nullptr;           // what ran
  // Measured seconds per stage and action type (F, B, I, W, STEP): the run's
  // steady-state means (runtime::RankResult::action_seconds), of wall time and of the
  // ranks' time on a core.
  std::map<std::pair<int, schedule::ActionType>, double> action_seconds;
  std::map<std::pair<int, schedule::ActionType>, double> action_cpu_seconds;
  int concurrent_ranks = 1;  // how many ranks the cores ran at once (localCluster)
  int blas_threads = 1;      // each rank's
  std::vector<int64_t> stage_output_bytes;
  std::vector<int64_t> stage_param_bytes;     // what replicas all-reduce
  std::vector<std::vector<int>> stage_preds;  // the stages each stage reads (the plan's stage DAG)
};

// The report and the predicted timeline of one mini-batch.
sim::Evaluation predictRun(const MeasuredRun& run);

}  // namespace pipetrain::cli
