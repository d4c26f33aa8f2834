// Activation recomputation (plan::Stage::recompute): the gradients are those of training
// without it on every schedule, split backward included; dropout's masks and batch norm's
// statistics come out as without it; and the memory a stage holds falls.
#include <gtest/gtest.h>

#include "../../src/torch/profiler/memory_probe.h"
#include "pipetrain/schedule/schedules.h"
#include "pipetrain/torch/executor.h"
#include "pipetrain/torch/transport.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

void recomputeEveryStage(TrainConfig& c) {
  for (plan::Stage& s : c.plan.stages) s.recompute = true;
}

TEST(Recomputation, EverySynchronousScheduleMatchesSingleProcess) {
  const std::vector<std::pair<std::string, models::ModelConfig>> models = {
      {"mlp", {{"input", 16}, {"layers", 4}, {"width", 32}}},
      {"gpt", {{"layers", 4}, {"width", 32}, {"heads", 2}, {"context", 8}}},
  };
  for (const auto& [model, config] : models)
    for (const std::string schedule : {"gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved", "zb-v", "dualpipev"}) {
      SCOPED_TRACE(model + " " + schedule);
      TrainConfig c = smallConfig(model, config);
      const bool looped = schedule == "interleaved";
      usePlan(c, schedule, {1, 1}, looped ? 2 : 1);
      recomputeEveryStage(c);
      expectMatchesReference(c);
    }
}

// Selective recomputation: each stage's first layers run again, the rest keep theirs.
TEST(Recomputation, SomeLayersOfEachStageOnEverySynchronousSchedule) {
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved", "zb-v", "dualpipev"})
    for (const int layers : {1, 2}) {
      SCOPED_TRACE(schedule + ", first " + std::to_string(layers));
      TrainConfig c = smallConfig("gpt", {{"layers", 6}, {"width", 32}, {"heads", 2}, {"context", 8}});
      const bool looped = schedule == "interleaved";
      usePlan(c, schedule, {1, 1}, looped ? 2 : 1);
      for (plan::Stage& s : c.plan.stages) {  // two to four layers each
        ASSERT_GE(s.layers.size(), 2u);
        s.recompute = true;
        s.recompute_layers = std::min(layers, static_cast<int>(s.layers.size()) - 1);
      }
      expectMatchesReference(c);
    }
}

// candle-uno's first stage holds two branches: recomputing the first (and the second's
// first layer) keeps the first branch's output, which the next stage reads, and the
// second's first output, which the stage's own rest reads.
TEST(Recomputation, SomeLayersWhoseOutputsLaterStagesRead) {
  for (const std::string schedule : {"1f1b", "zb-h1"})
    for (const int layers : {2, 3}) {
      SCOPED_TRACE(schedule + ", first " + std::to_string(layers));
      TrainConfig c = smallConfig("candle-uno", {{"branches", 3}, {"features", 6}, {"layers", 2}, {"width", 8}});
      usePlan(c, schedule, {1, 1});
      ASSERT_EQ(c.plan.stages[0].layers, (std::vector<std::string>{"b0_fc0", "b0_fc1", "b1_fc0", "b1_fc1"}));
      c.plan.stages[0].recompute = true;
      c.plan.stages[0].recompute_layers = layers;
      expectMatchesReference(c);
    }
}

TEST(Recomputation, OnSomeStagesAndWithReplicas) {
  TrainConfig c = smallConfig("gpt", {{"layers", 4}, {"width", 32}, {"heads", 2}, {"context", 8}});
  usePlan(c, "1f1b", {2, 1});
  c.plan.stages[1].recompute = true;
  expectMatchesReference(c);
}

TEST(Recomputation, WeightStashingSchedulesMatchTheirStalenessRule) {
  // The second forward pass runs on the version the first read, stashed until B.
  for (const std::string schedule : {"pipedream", "2bw"}) {
    SCOPED_TRACE(schedule);
    TrainConfig c = smallConfig("mlp", {{"input", 16}, {"layers", 4}, {"width", 32}});
    c.max_steps_per_epoch = 8;
    usePlan(c, schedule, {1, 1, 1});
    recomputeEveryStage(c);
    expectMatchesStalenessReference(c);
  }
}

TEST(Recomputation, RefusedWhereTheBackwardPassReadsTheLatestWeights) {
  TrainConfig c = smallConfig("mlp", {{"input", 16}, {"layers", 4}, {"width", 32}});
  usePlan(c, "pipemare", {1, 1});
  c.plan.stages[0].recompute = true;
  EXPECT_NE(errorOf([&] { runInProcess(c, 2); }).find("latest weights"), std::string::npos);
}

// Linear -> dropout -> batch norm -> linear, in one stage: what the replay must keep equal.
models::Model randomModel(int width) {
  torch::manual_seed(5);
  namespace nn = torch::nn;
  models::Model m;
  m.name = "random";
  m.input.kind = models::InputKind::kFeatures;
  m.input.sample_shape = {width};
  m.input.num_classes = 3;
  m.layers.push_back({"in", "linear", nn::AnyModule(nn::Linear(width, width))});
  m.layers.push_back({"drop", "dropout", nn::AnyModule(nn::Dropout(0.5))});
  m.layers.push_back({"norm", "batch_norm", nn::AnyModule(nn::BatchNorm1d(width))});
  for (int i = 0; i < 6; ++i)
    m.layers.push_back({"hidden" + std::to_string(i), "linear", nn::AnyModule(nn::Linear(width, width))});
  m.layers.push_back({"out", "linear", nn::AnyModule(nn::Linear(width, 3))});
  models::checkWiring(m);
  for (auto& l : m.layers) l.module.ptr()->train();
  return m;
}

struct OneRankRun {
  std::vector<torch::Tensor> parameters, buffers;
  int64_t peak_bytes = 0;
  double first_draw_after = 0;  // what the generator draws next: the stream left as without recomputation
};

// One mini-batch of GPipe on one rank: every forward pass before the first backward, so
// recomputation replays micro-batch 0 after the others drew their masks.
// `recomputed`: how many of the stage's first layers recompute (0: none).
OneRankRun runOneStage(int recomputed, int width, int microbatches, int64_t b) {
  torch::manual_seed(11);
  const torch::Tensor x = torch::randn({microbatches * b, width});
  const torch::Tensor y = torch::randint(0, 3, {microbatches * b});
  models::Model model = randomModel(width);
  std::vector<int> all;
  for (int l = 0; l < static_cast<int>(model.layers.size()); ++l) all.push_back(l);
  schedule::ScheduleSpec spec;
  spec.name = "gpipe";
  spec.microbatches = microbatches;
  const schedule::Program program = schedule::buildProgram(spec, schedule::chainDag(1));
  auto group = makeInProcessGroup(1, std::chrono::seconds(20));
  auto sgd = [](int, std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(std::move(p), torch::optim::SGDOptions(0.1));
  };
  const int layers = static_cast<int>(all.size());
  PipelineExecutor executor(program, 0, model, {StageLayers{all, recomputed > 0, recomputed < layers ? recomputed : 0}},
                            b, *group[0], sgd);
  MicrobatchData data{[&](int j) { return x.narrow(0, j * b, b); }, [&](int j) { return y.narrow(0, j * b, b); }, {}};
  OneRankRun out;
  torch::manual_seed(13);  // the masks' stream, the same for both runs
  {
    profiler::MemoryProbe probe(torch::kCPU);
    executor.run(program, data, Clock::now());
    out.peak_bytes = probe.peak();
  }
  out.first_draw_after = torch::rand({1}).item<double>();
  for (const auto& p : executor.parameters()) out.parameters.push_back(p.detach().clone());
  for (const auto& l : model.layers)
    for (const auto& t : l.module.ptr()->buffers()) out.buffers.push_back(t.clone());
  return out;
}

TEST(Recomputation, DropoutAndBatchNormComeOutAsWithout) {
  const OneRankRun kept = runOneStage(0, 16, 4, 8);
  for (const int layers : {10, 3}) {  // all of them; in, dropout and batch norm only
    SCOPED_TRACE(layers);
    const OneRankRun recomputed = runOneStage(layers, 16, 4, 8);
    EXPECT_EQ(largestDifference(recomputed.parameters, kept.parameters), 0.0);
    EXPECT_EQ(largestDifference(recomputed.buffers, kept.buffers), 0.0);  // running statistics updated once
    EXPECT_EQ(recomputed.first_draw_after, kept.first_draw_after);
  }
}

TEST(Recomputation, TheStageHoldsLessMemory) {
  // Eight micro-batches in flight at once: without recomputation each holds every layer's
  // saved activations; with it, its input and the loss, and one micro-batch at a time
  // holds the rest.
  const OneRankRun kept = runOneStage(0, 256, 8, 512), recomputed = runOneStage(10, 256, 8, 512);
  ASSERT_GT(kept.peak_bytes, 0);
  RecordProperty("peak_bytes_kept", std::to_string(kept.peak_bytes));
  RecordProperty("peak_bytes_recomputed", std::to_string(recomputed.peak_bytes));
  EXPECT_LT(recomputed.peak_bytes, kept.peak_bytes / 3) << kept.peak_bytes << " vs " << recomputed.peak_bytes;
  // Half the layers: between the two (the other half and the boundary stay).
  const OneRankRun half = runOneStage(5, 256, 8, 512);
  RecordProperty("peak_bytes_half_recomputed", std::to_string(half.peak_bytes));
  EXPECT_LT(half.peak_bytes, kept.peak_bytes * 3 / 4) << kept.peak_bytes << " vs " << half.peak_bytes;
  EXPECT_GT(half.peak_bytes, recomputed.peak_bytes) << half.peak_bytes << " vs " << recomputed.peak_bytes;
}

}  // namespace
}  // namespace pipetrain::runtime
