// The training recipe across stages (recipe/recipe.h, executor.h's StepRecipe): AdamW
// with weight decay on some parameters only, a decaying learning rate, and clipping by
// the gradient norm, each matching single-process training for the synchronous
// schedules, and the staleness rule's reference for the asynchronous ones.
#include <gtest/gtest.h>

#include <cmath>

#include "../core/expect_error.h"
#include "../../src/torch/runtime/optimizer_state.h"
#include "pipetrain/torch/trainer.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

const models::ModelConfig kGpt = {{"layers", 4}, {"width", 32}, {"heads", 2}, {"context", 8}};
const models::ModelConfig kMlp = {{"input", 16}, {"layers", 6}, {"width", 32}};

// A clip norm below the gradients' norm, so that every step clips: the mlp's and the
// gpt's first gradients are of norm ~0.3-2 on this data.
constexpr double kClip = 0.05;

void expectEveryStepClipped(const std::vector<RankResult>& results, int64_t steps) {
  for (const RankResult& r : results) {
    ASSERT_EQ(static_cast<int64_t>(r.grad_norms.size()), steps) << "rank " << r.rank;
    for (std::size_t k = 0; k < r.grad_norms.size(); ++k) {
      EXPECT_GT(r.grad_norms[k], kClip) << "rank " << r.rank << " step " << k;
      // The whole model's norm: every rank agrees on it.
      EXPECT_NEAR(r.grad_norms[k], results.front().grad_norms[k], 1e-6 * r.grad_norms[k]);
    }
  }
}

TEST(Recipe, ClippingByTheWholeModelsNormMatchesSingleProcessForEverySynchronousSchedule) {
  const std::vector<std::tuple<std::string, models::ModelConfig, std::string, std::vector<int>>> runs = {
      {"mlp", kMlp, "gpipe", {1, 1, 1}},      {"mlp", kMlp, "1f1b", {1, 1}},       {"gpt", kGpt, "zb-h1", {1, 1}},
      {"mlp", kMlp, "zb-h2", {1, 1, 1}},      {"gpt", kGpt, "zb-v", {1, 1}},       {"mlp", kMlp, "dualpipev", {1, 1}},
      {"gpt", kGpt, "1f1b", {2, 1}},          {"mlp", kMlp, "1f1b", {2}},          {"mlp", kMlp, "zb-h1", {1, 2}}};
  for (const auto& [model, config, schedule, replicas] : runs) {
    SCOPED_TRACE(model + " " + schedule + " on " + std::to_string(replicas.size()) + " stages");
    TrainConfig c = smallConfig(model, config);
    c.clip_grad_norm = kClip;
    c.plan.microbatches = 4;
    usePlan(c, schedule, replicas);
    expectMatchesReference(c);
    expectEveryStepClipped(runInProcess(c, rankCount(c), Wire::kInProcess), c.max_steps_per_epoch);
  }
  TrainConfig c = smallConfig("mlp", kMlp);  // interleaved: two stages a rank
  c.clip_grad_norm = kClip;
  usePlan(c, "interleaved", {1, 1}, 2);
  expectMatchesReference(c);
}

TEST(Recipe, ClippingChangesTraining) {
  TrainConfig c = smallConfig("mlp", kMlp);
  usePlan(c, "1f1b", {1, 1});
  const models::Model plain = trainReference(c);
  c.clip_grad_norm = kClip;
  const models::Model clipped = trainReference(c);
  const int n = static_cast<int>(plain.layers.size());
  EXPECT_GT(relativeError(clipped.parameters(0, n), plain.parameters(0, n)), 1e-3);
}

TEST(Recipe, AdamWWithNoDecayOnBiasesAndACosineScheduleMatchesSingleProcess) {
  for (const std::string schedule : {"1f1b", "zb-h1"}) {
    SCOPED_TRACE(schedule);
    TrainConfig c = smallConfig("gpt", kGpt);
    c.optimizer.name = "adamw";
    c.optimizer.weight_decay = 0.1;
    c.optimizer.beta2 = 0.95;
    c.optimizer.no_decay = "1d";
    c.lr = 1e-2;
    c.lr_schedule.decay = "cosine";
    c.lr_schedule.warmup_steps = 1;
    c.lr_schedule.min_lr = 1e-3;
    c.clip_grad_norm = 1.0;
    usePlan(c, schedule, {1, 1, 1});
    expectMatchesReference(c);
  }
}

TEST(Recipe, SgdWithNesterovWeightDecayAndClippingMatchesUnderBf16MasterWeights) {
  // Autocast computes in bf16; the weights, gradients and optimizer state stay fp32.
  TrainConfig c = smallConfig("mlp", kMlp);
  c.precision = "bf16";
  c.optimizer.nesterov = true;
  c.optimizer.weight_decay = 0.01;
  c.optimizer.no_decay = "bias";
  c.lr_schedule.decay = "step";
  c.lr_schedule.step_size = 1;
  c.lr_schedule.gamma = 0.5;
  c.clip_grad_norm = kClip;
  usePlan(c, "zb-h1", {1, 1, 1});
  // Micro-batches round their bf16 products apart from the whole batch's (cuda_test.cpp).
  expectMatchesReference(c, Wire::kInProcess, /*sgd_bound=*/4e-3);
}

TEST(Recipe, EachPartChangesTheReference) {
  // So that matching the reference says something about each part of the recipe.
  TrainConfig base = smallConfig("mlp", kMlp);
  base.optimizer.name = "adamw";
  base.optimizer.weight_decay = 0.5;
  base.lr = 1e-2;
  usePlan(base, "1f1b", {1, 1});
  const int n = static_cast<int>(openModel(base).layers.size());
  const models::Model reference = trainReference(base);
  auto moved = [&](const TrainConfig& c) {
    return relativeError(trainReference(c).parameters(0, n), reference.parameters(0, n));
  };
  TrainConfig exempt = base;
  exempt.optimizer.no_decay = "bias";
  EXPECT_GT(moved(exempt), 1e-6);
  TrainConfig decayed = base;
  decayed.lr_schedule.decay = "linear";
  decayed.lr_schedule.min_lr = 1e-3;
  EXPECT_GT(moved(decayed), 1e-4);
  TrainConfig adam = base;
  adam.optimizer.name = "adam";
  EXPECT_GT(moved(adam), 1e-4);
}

TEST(Recipe, AsynchronousSchedulesClipEachStageByItsOwnNorm) {
  for (const std::string schedule : {"pipedream", "2bw", "pipemare"}) {
    SCOPED_TRACE(schedule);
    TrainConfig c = smallConfig("mlp", kMlp);
    c.plan.schedule.pipemare_lr_warmup = false;
    c.plan.schedule.pipemare_correction = false;
    c.clip_grad_norm = kClip;
    c.lr_schedule.decay = "cosine";
    c.lr_schedule.min_lr = 0.01;
    usePlan(c, schedule, {1, 1, 1});
    expectMatchesStalenessReference(c);
    TrainConfig unclipped = c;
    unclipped.clip_grad_norm = 0;
    const models::Model a = trainStalenessReference(c), b = trainStalenessReference(unclipped);
    const int n = static_cast<int>(a.layers.size());
    EXPECT_GT(relativeError(a.parameters(0, n), b.parameters(0, n)), 1e-3);
  }
}

TEST(Recipe, AdamWStateMovesWithItsParameter) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> params{torch::randn({4, 3}).requires_grad_(true), torch::randn({3}).requires_grad_(true)};
  recipe::OptimizerOptions o;
  o.name = "adamw";
  o.weight_decay = 0.1;
  o.no_decay = "bias";
  auto optimizer = makeOptimizer(o, 1e-2, params, {"fc.weight", "fc.bias"});
  ASSERT_EQ(optimizer->param_groups().size(), 2u);  // decayed, then exempt
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(optimizer->param_groups()[1].options()).weight_decay(), 0);
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  optimizer->step();
  const auto state = optimizerState(*optimizer, params[0]);
  EXPECT_EQ(state.at("adamw.step").item<int64_t>(), 1);
  auto other = makeOptimizer(o, 1e-2, params, {"fc.weight", "fc.bias"});
  setOptimizerState(*other, params[0], state);
  EXPECT_TRUE(optimizerState(*other, params[0]).at("adamw.exp_avg").equal(state.at("adamw.exp_avg")));
  o.name = "adam";
  auto adam = makeOptimizer(o, 1e-2, params, {"fc.weight", "fc.bias"});
  testing::expectError([&] { setOptimizerState(*adam, params[0], state); }, {"adamw", "adam"});
}

TEST(Recipe, RefusesABadRecipeNamingTheOption) {
  TrainConfig c = smallConfig("mlp", kMlp);
  usePlan(c, "1f1b", {1, 1});
  const models::Model model = openModel(c);
  c.optimizer.weight_decay = 0.1;
  c.optimizer.no_decay = "layernorm";
  testing::expectError([&] { checkConfig(c, model, 2); }, {"--no-decay", "layernorm", "matches none", "mlp"});
  c.optimizer.no_decay = "bias";
  checkConfig(c, model, 2);
  c.optimizer.name = "lamb";
  testing::expectError([&] { checkConfig(c, model, 2); }, {"--optimizer", "lamb"});
  c = smallConfig("mlp", kMlp);
  usePlan(c, "1f1b", {1, 1});
  c.lr_schedule.decay = "cosine-restarts";
  testing::expectError([&] { checkConfig(c, model, 2); }, {"--lr-schedule"});
  c.lr_schedule.decay = "cosine";
  c.clip_grad_norm = -1;
  testing::expectError([&] { checkConfig(c, model, 2); }, {"--clip-grad-norm"});
}

}  // namespace
}  // namespace pipetrain::runtime
