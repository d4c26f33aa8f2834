#include "pipetrain/recipe/recipe.h"

#include <cmath>

#include <gtest/gtest.h>

#include "../expect_error.h"

namespace pipetrain::recipe {
namespace {

using testing::expectError;

constexpr double kPi = 3.14159265358979323846;

TEST(LearningRateSchedule, WarmUpThenCosineToTheFloorAsTorchChainsThem) {
  LearningRateSchedule s;
  s.decay = "cosine";
  s.warmup_steps = 4;
  s.min_lr = 0.1;
  const int64_t total = 14;  // 10 steps of decay
  EXPECT_DOUBLE_EQ(s.rate(1.0, 0, total), 0.25);
  EXPECT_DOUBLE_EQ(s.rate(1.0, 3, total), 1.0);
  EXPECT_DOUBLE_EQ(s.rate(1.0, 4, total), 1.0);  // the decay's first step is at the full rate
  for (int64_t i = 0; i < 10; ++i)
    EXPECT_NEAR(s.rate(1.0, 4 + i, total), 0.1 + 0.9 * (1 + std::cos(kPi * i / 10.0)) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(s.rate(1.0, total, total), 0.1);
  EXPECT_DOUBLE_EQ(s.rate(1.0, total + 5, total), 0.1);  // past the run: held at the floor
}

TEST(LearningRateSchedule, LinearAndStepDecay) {
  LearningRateSchedule linear;
  linear.decay = "linear";
  linear.min_lr = 0.2;
  EXPECT_DOUBLE_EQ(linear.rate(2.0, 0, 10), 2.0);
  EXPECT_DOUBLE_EQ(linear.rate(2.0, 5, 10), 1.1);
  EXPECT_DOUBLE_EQ(linear.rate(2.0, 10, 10), 0.2);

  LearningRateSchedule step;
  step.decay = "step";
  step.warmup_steps = 2;
  step.step_size = 3;
  step.gamma = 0.5;
  step.min_lr = 0.2;
  EXPECT_DOUBLE_EQ(step.rate(1.0, 2, 100), 1.0);
  EXPECT_DOUBLE_EQ(step.rate(1.0, 4, 100), 1.0);
  EXPECT_DOUBLE_EQ(step.rate(1.0, 5, 100), 0.5);
  EXPECT_DOUBLE_EQ(step.rate(1.0, 8, 100), 0.25);
  EXPECT_DOUBLE_EQ(step.rate(1.0, 11, 100), 0.2);  // the floor
}

TEST(LearningRateSchedule, ConstantAndRunsNoLongerThanTheWarmUp) {
  LearningRateSchedule s;
  EXPECT_DOUBLE_EQ(s.rate(0.3, 0, 10), 0.3);
  s.decay = "cosine";
  s.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(s.rate(0.3, 12, 5), 0.3);  // no step left to decay over
}

TEST(LearningRateSchedule, RefusesWhatItCannotRun) {
  LearningRateSchedule s;
  s.decay = "exponential";
  expectError([&] { checkSchedule(s, 1e-3); }, {"--lr-schedule", "cosine", "exponential"});
  s = {};
  s.min_lr = 1e-4;
  expectError([&] { checkSchedule(s, 1e-3); }, {"--lr-min", "--lr-schedule"});
  s.decay = "cosine";
  s.min_lr = 1e-2;
  expectError([&] { checkSchedule(s, 1e-3); }, {"--lr-min", "--lr"});
  s = {};
  s.decay = "step";
  expectError([&] { checkSchedule(s, 1e-3); }, {"--lr-step-size"});
  s.step_size = 2;
  s.gamma = 0;
  expectError([&] { checkSchedule(s, 1e-3); }, {"--lr-gamma"});
  s = {};
  s.warmup_steps = -1;
  expectError([&] { checkSchedule(s, 1e-3); }, {"--lr-warmup"});
  expectError([] { checkClipNorm(-1); }, {"--clip-grad-norm"});
  expectError([] { checkClipNorm(NAN); }, {"--clip-grad-norm"});
  checkClipNorm(0);  // off
}

TEST(OptimizerOptions, WeightDecayDefaultsAreTorchOptims) {
  OptimizerOptions o;
  EXPECT_EQ(o.weightDecay(), 0);
  o.name = "adamw";
  EXPECT_EQ(o.weightDecay(), 0.01);
  o.weight_decay = 0.1;
  EXPECT_EQ(o.weightDecay(), 0.1);
  o.weight_decay = 0;
  EXPECT_EQ(o.weightDecay(), 0);
}

TEST(OptimizerOptions, RefusesEachBadOptionByName) {
  auto refused = [](OptimizerOptions o, const std::vector<std::string>& words) {
    expectError([&] { checkOptimizer(o); }, words);
  };
  OptimizerOptions o;
  o.name = "rmsprop";
  refused(o, {"--optimizer", "adamw", "rmsprop"});
  o = {};
  o.weight_decay = -0.1;
  refused(o, {"--weight-decay"});
  o = {};
  o.beta2 = 1.0;
  refused(o, {"--betas"});
  o = {};
  o.eps = 0;
  refused(o, {"--eps"});
  o = {};
  o.nesterov = true;
  refused(o, {"--nesterov", "sgd"});
  o.name = "sgd";
  o.momentum = 0;
  refused(o, {"--nesterov", "--momentum"});
  o = {};
  o.momentum = 0.5;
  refused(o, {"--momentum", "--betas"});
  o = {};
  o.name = "sgd";
  o.beta1 = 0.8;
  refused(o, {"--betas", "--momentum"});
  o = {};
  o.no_decay = "bias";
  refused(o, {"--no-decay", "--weight-decay"});
  o.weight_decay = 0.1;
  o.no_decay = "bias,(";
  refused(o, {"--no-decay", "("});
  o.no_decay = "bias,,norm";
  refused(o, {"--no-decay", "empty"});
  o.no_decay = "bias,norm";
  checkOptimizer(o);
  o = {};
  o.name = "sgd";
  o.nesterov = true;
  checkOptimizer(o);
}

TEST(NoDecayRule, NamesDimsAndHuggingFacesPatterns) {
  const NoDecayRule hf("hf");
  EXPECT_TRUE(hf.exempts("transformer.h.0.attn.c_attn.bias", 1));
  EXPECT_TRUE(hf.exempts("model.layers.0.input_layernorm.weight", 1));
  EXPECT_TRUE(hf.exempts("model.norm.weight", 1));
  EXPECT_TRUE(hf.exempts("model.layers.0.self_attn.q_norm.weight", 1));
  EXPECT_FALSE(hf.exempts("model.layers.0.mlp.down_proj.weight", 2));
  EXPECT_FALSE(hf.exempts("model.normalizer.weight", 2));  // "norm" only as a whole name part
  EXPECT_FALSE(hf.exempts("transformer.h.0.ln_1.weight", 1));  // a LayerNorm by type only (documented)

  const NoDecayRule dims("1d");
  EXPECT_TRUE(dims.exempts("transformer.h.0.ln_1.weight", 1));
  EXPECT_TRUE(dims.exempts("head.bias", 1));
  EXPECT_FALSE(dims.exempts("transformer.wte.weight", 2));

  const NoDecayRule names("Bias,wte|wpe");
  EXPECT_TRUE(names.exempts("fc1.bias", 1));
  EXPECT_TRUE(names.exempts("transformer.wte.weight", 2));
  EXPECT_FALSE(names.exempts("fc1.weight", 2));
  EXPECT_TRUE(NoDecayRule("").empty());
}

}  // namespace
}  // namespace pipetrain::recipe
