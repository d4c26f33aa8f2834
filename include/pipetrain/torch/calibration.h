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

#include "pipetrain/planner/calibration.h"
#include "pipetrain/planner/time_to_target.h"
#include "pipetrain/torch/data.h"
#include "pipetrain/torch/trainer.h"

namespace pipetrain::runtime {

struct CalibrationBudget {
  double seconds_per_rule = 4;  // of training and evaluating, by a trial mini-batch's time
  int evaluations = 12;         // of the held-out loss, after equal shares of the samples
  int64_t held_out = 512;       // samples of the test split each evaluation reads
  int64_t min_minibatches = 8;  // trained per rule whatever the budget says
};

// The samples every rule trains: the budget's worth at `seconds_per_sample` (a trial's),
// in a power of two of mini-batches of `batch`, at least the budget's minimum and at most
// one pass over `dataset_size`.
int64_t calibrationSamples(double seconds_per_sample, int64_t batch, int64_t dataset_size,
                           const CalibrationBudget& budget);

// Trains the rules the planner asks about (planner::calibrateRules) for `config`'s
// model, data, optimizer and seed. Starts from the curves that `cache_path` holds for
// the same identity and budget, and writes each new curve back there ("" = no cache).
// Without a cache, a trial mini-batch of the first rule decides the samples per rule.
// Says on stdout what it trains.
class RuleCalibrator : public planner::Calibrator {
 public:
  // `batch` is the run's mini-batch.
  RuleCalibrator(const TrainConfig& config, int64_t batch, const CalibrationBudget& budget, std::string cache_path);
  planner::Calibration& calibration() override { return calibration_; }
  void measure(const planner::RuleToCalibrate& rule, bool repeat) override;
  double trainingSeconds() const override { return training_seconds_; }

 private:
  const TrainConfig config_;
  const CalibrationBudget budget_;
  const std::string cache_path_;
  void decideSamples(const plan::Plan& plan);

  data::Batch held_out_;
  planner::Calibration calibration_;
  double training_seconds_ = 0;
};

}  // namespace pipetrain::runtime
