// Calibration for the time-to-accuracy objective (planner/time_to_target.h): train each
// update rule the planner asks about from the same initial weights, on the same data
// order, in this process, for the same number of samples, and record the held-out
// loss along the way (planner::Calibration). Asynchronous rules are replayed exactly by
// their staleness rule (staleness_replay.h), so a rule's curve is what pipelined
// training by it would give, without the pipeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/graph/layer_graph.h"
#include "pipetrain/planner/calibration.h"
#include "pipetrain/planner/time_to_target.h"
#include "pipetrain/torch/trainer.h"

namespace pipetrain::runtime {

struct CalibrationBudget {
  double seconds_per_rule = 6;  // of training, estimated from the profile's pass times
  int evaluations = 12;         // of the held-out loss, after equal shares of the samples
  int64_t held_out = 512;       // samples of the test split each evaluation reads
  int64_t min_minibatches = 8;  // trained per rule whatever the budget says
};

// The samples every rule trains: the budget's worth by the profile's times (`profile`,
// the model's at the run's micro-batch size), in whole mini-batches of `batch`, at
// least the budget's minimum and at most one pass over `dataset_size` samples.
int64_t calibrationSamples(const graph::LayerGraph& profile, int64_t batch, int64_t dataset_size,
                           const CalibrationBudget& budget);

// Measures `rules` (the first the synchronous yardstick) for `config`'s model, data,
// optimizer and seed. Reads the curves that `cache_path` holds for the same identity
// and budget, measures the rest, and writes them all back there ("" = no cache).
// Says on stdout what it measures.
planner::Calibration calibrate(const TrainConfig& config, const graph::LayerGraph& profile,
                               const std::vector<planner::RuleToCalibrate>& rules, const CalibrationBudget& budget,
                               const std::string& cache_path);

}  // namespace pipetrain::runtime
