// What a short calibration run measured about a model's update rules (update_rule.h),
// and the progress per sample read off it.
//
// Calibration trains each rule from the same initial weights on the same data order, in
// one process, for the same number of samples, and records the held-out loss along the
// way (runtime/calibration.h). The synchronous rule is the yardstick: the target is the
// loss it reached, and a rule's efficiency is how much faster per sample it gets there,
// i.e. the samples the synchronous rule needs for the loss the rule reached, over the
// samples the rule took. The synchronous rule is trained a second time on another data
// order; how far that repeat's efficiency is from 1 is the noise every efficiency carries.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/util/json_io.h"

namespace pipetrain::planner {

// The held-out loss after so many trained samples; samples[0] = 0, increasing.
struct LossCurve {
  std::vector<int64_t> samples;
  std::vector<double> loss;

  // The best loss by each point (a running minimum): a loss reached stays reached.
  LossCurve bestSoFar() const;
  // The samples at which the best-so-far curve first reaches `loss`, interpolated
  // linearly between evaluations; nullopt where it never does.
  std::optional<double> samplesToReach(double loss) const;
  double finalLoss() const { return bestSoFar().loss.back(); }
};

struct Calibration {
  // What the curves hold for (model, data, optimizer, budget): a cached calibration with
  // another identity is measured again.
  json_io::Json identity;
  int64_t samples = 0;                      // trained per rule
  std::string synchronous_key;              // the yardstick's rule
  std::map<std::string, LossCurve> curves;  // by rule key
  std::map<std::string, std::string> descriptions;  // by rule key
  LossCurve repeat;                         // the synchronous rule on another data order (empty until measured)
  double seconds = 0;                       // what measuring took (where this run measured)

  static Calibration fromJson(const json_io::Json& j, const std::string& origin);
  static Calibration load(const std::string& path);
  json_io::Json toJson() const;

  // The synchronous rule's final best loss: the loss the time-to-accuracy objective
  // predicts the time to.
  double targetLoss() const;
  // The relative noise of every efficiency: |1 - the repeat's efficiency|.
  double noise() const;
};

struct Efficiency {
  double value = 1;           // progress per sample relative to the synchronous rule
  double low = 1, high = 1;   // value / (1 + noise) .. value * (1 + noise)
  bool reached = true;        // whether the rule reached the target within the calibration
};

// nullopt when `key` was not calibrated. Throws Error when the synchronous rule's curve
// is missing or has no progress (a loss that never fell: nothing to measure against).
std::optional<Efficiency> efficiencyOf(const Calibration& calibration, const std::string& key);

}  // namespace pipetrain::planner
