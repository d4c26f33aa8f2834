// Calibration trains each update rule exactly as its single-process reference does,
// keeps the curves in its cache, and measures them again when the run differs.
#include "pipetrain/torch/calibration.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "training_harness.h"
#include "pipetrain/planner/update_rule.h"

namespace pipetrain::runtime {
namespace {

TrainConfig fmnistMlp() {
  TrainConfig c = smallConfig("mlp", {{"layers", 4}, {"width", 64}});
  c.data.name = "fashion-mnist";
  c.optimizer.name = "adam";
  c.lr = 1e-3;
  c.plan.microbatch_size = 16;
  c.plan.microbatches = 4;
  return c;
}

CalibrationBudget tinyBudget() {
  CalibrationBudget b;
  b.seconds_per_rule = 1e-6;  // the minimum: 8 mini-batches
  b.evaluations = 4;
  b.held_out = 256;
  return b;
}

planner::RuleToCalibrate ruleFor(TrainConfig& c, const std::string& schedule) {
  usePlan(c, schedule, {1, 1});
  const models::Model model = openModel(c);
  return {planner::updateRuleOf(c.plan, model.layerGraph()), c.plan, 1.0};
}

// The held-out loss `model` has on the calibration's samples (the test split's first).
double heldOutLoss(const TrainConfig& c, const models::Model& model, int64_t samples) {
  data::DataOptions test = c.data;
  test.split = "test";
  std::vector<int64_t> first;
  for (int64_t i = 0; i < samples; ++i) first.push_back(i);
  const data::Batch batch = data::openDataset(test, model.input)->get(first);
  torch::NoGradGuard no_grad;
  return models::lossOf(model, models::forwardModel(model, batch.inputs), batch.labels).item<double>();
}

TEST(Calibration, TrainsEachRuleAsItsReferenceAndCachesTheCurves) {
  TrainConfig c = fmnistMlp();
  const std::string cache = ::testing::TempDir() + "calibration_test.json";
  std::filesystem::remove(cache);
  const planner::RuleToCalibrate sync = ruleFor(c, "1f1b"), pipedream = ruleFor(c, "pipedream");
  ASSERT_TRUE(sync.rule.synchronous);
  ASSERT_FALSE(pipedream.rule.synchronous);
  {
    RuleCalibrator calibrator(c, 64, tinyBudget(), cache);
    EXPECT_EQ(calibrator.calibration().samples, 0);  // until a trial of the first rule
    calibrator.calibration().synchronous_key = sync.rule.key;
    calibrator.measure(sync, false);
    EXPECT_EQ(calibrator.calibration().samples, 8 * 64);  // the budget's minimum
    calibrator.measure(sync, true);
    calibrator.measure(pipedream, false);
    const planner::Calibration& k = calibrator.calibration();
    const planner::LossCurve& curve = k.curves.at(sync.rule.key);
    EXPECT_EQ(curve.samples, (std::vector<int64_t>{0, 128, 256, 384, 512}));
    EXPECT_LT(curve.loss.back(), curve.loss.front());  // it learned
    EXPECT_NE(k.repeat.loss.back(), curve.loss.back());  // another data order
    EXPECT_EQ(k.repeat.loss.front(), curve.loss.front());  // from the same weights
    // Each curve ends where the rule's single-process reference ends after 8 steps.
    for (const planner::RuleToCalibrate* r : {&sync, &pipedream}) {
      TrainConfig reference = c;
      reference.plan = r->plan;
      reference.max_steps_per_epoch = 8;
      const double expected = heldOutLoss(c, trainStalenessReference(reference), 256);
      EXPECT_NEAR(k.curves.at(r->rule.key).loss.back(), expected, 1e-5 * expected) << r->rule.key;
    }
    EXPECT_NE(k.curves.at(pipedream.rule.key).loss.back(), curve.loss.back());
  }
  // The cache holds them for the same run ...
  RuleCalibrator again(c, 64, tinyBudget(), cache);
  EXPECT_EQ(again.calibration().curves.size(), 2u);
  EXPECT_EQ(again.calibration().repeat.samples.size(), 5u);
  // ... and not for another learning rate.
  c.lr = 2e-3;
  RuleCalibrator other(c, 64, tinyBudget(), cache);
  EXPECT_TRUE(other.calibration().curves.empty());
  // A damaged cache is measured again, with a note, not an error.
  { std::ofstream(cache) << "{ not json"; }
  RuleCalibrator damaged(c, 64, tinyBudget(), cache);
  EXPECT_TRUE(damaged.calibration().curves.empty());
  std::filesystem::remove(cache);
}

TEST(Calibration, SamplesFollowTheBudgetInPowersOfTwoOfMiniBatches) {
  CalibrationBudget b;
  b.seconds_per_rule = 10;
  b.evaluations = 0;
  // 10 s / 12 ms = 833 samples = 13 mini-batches of 64 -> 8.
  EXPECT_EQ(calibrationSamples(12e-3, 64, 100000, b), 8 * 64);
  b.seconds_per_rule = 20;  // 26 -> 16
  EXPECT_EQ(calibrationSamples(12e-3, 64, 100000, b), 16 * 64);
  EXPECT_EQ(calibrationSamples(12e-3, 64, 64 * 10, b), 10 * 64);  // one pass over the data at most
  b.evaluations = 12;  // 12 x 512 held-out samples at 4 ms: 24.6 s, the whole budget
  EXPECT_EQ(calibrationSamples(12e-3, 64, 100000, b), 8 * 64);  // the minimum
  const std::string error = errorOf([&] { calibrationSamples(12e-3, 64, 32, b); });
  EXPECT_NE(error.find("a mini-batch of 64 samples; the data has 32"), std::string::npos) << error;
}

}  // namespace
}  // namespace pipetrain::runtime
