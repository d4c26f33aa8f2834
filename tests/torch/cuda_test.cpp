// Training on a GPU, and what a run's device and precision mean on any machine.
//
// The Cuda tests need a CUDA device and skip where LibTorch sees none (CI, this
// project's own machines): scripts/device_check.sh runs them on a lent GPU. There every
// rank is a thread on the one GPU, over the in-process transport or over Gloo through
// host copies, and each schedule must end with the parameters of single-GPU training of
// its rule (synchronous SGD, or the Program's staleness), as on the CPU.
#include <gtest/gtest.h>

#include <torch/cuda.h>

#include "../core/expect_error.h"
#include "../../src/torch/runtime/optimizer_state.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/precision.h"
#include "pipetrain/torch/transport.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

#define REQUIRE_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "LibTorch sees no CUDA device here"

TrainConfig onGpu(TrainConfig c) {
  c.device = "cuda";
  return c;
}

const std::vector<std::pair<std::string, models::ModelConfig>>& gpuModels() {
  static const std::vector<std::pair<std::string, models::ModelConfig>> all = {
      {"mlp", {{"input", 16}, {"layers", 6}, {"width", 32}}},
      {"gpt", {{"layers", 4}, {"width", 32}, {"heads", 2}, {"context", 8}}},
  };
  return all;
}

TEST(Devices, RankDevicesFromTheOption) {
  EXPECT_TRUE(rankDevice("cpu", 3).is_cpu());
  EXPECT_EQ(rankDevice("auto", 0).is_cuda(), torch::cuda::is_available());
  testing::expectError([&] { rankDevice("gpu", 0); }, {"--device gpu: expected cpu, cuda"});
  if (!torch::cuda::is_available()) {
    testing::expectError([&] { rankDevice("cuda", 0); }, {"--device cuda: LibTorch sees no CUDA device"});
    return;
  }
  const int gpus = static_cast<int>(torch::cuda::device_count());
  EXPECT_EQ(rankDevice("cuda", gpus).index(), 0);  // ranks beyond the GPUs share them
  EXPECT_EQ(rankDevice("cuda:0,0", 1).index(), 0);
  testing::expectError([&] { rankDevice("cuda:x", 0); }, {"'x' is not a GPU number"});
  testing::expectError([&] { rankDevice("cuda:" + std::to_string(gpus), 0); }, {"does not exist"});
}

TEST(Devices, PrecisionNames) {
  EXPECT_EQ(parsePrecision("bf16"), Precision::kBf16);
  EXPECT_STREQ(precisionName(parsePrecision("fp32")), "fp32");
  testing::expectError([&] { parsePrecision("fp16"); }, {"--precision fp16: expected fp32 or bf16"});
}

// bf16 by autocast, on whatever device there is: the pipeline matches single-process
// training at the same precision, and that training is not fp32's (autocast acted).
TEST(Devices, Bf16MatchesSingleProcessAtItsPrecision) {
  TrainConfig c = smallConfig("mlp", {{"input", 16}, {"layers", 4}, {"width", 32}});
  c.device = "auto";
  usePlan(c, "1f1b", {1, 1});
  c.precision = "bf16";
  // Micro-batches round their bf16 products apart from the whole batch's: a bound of
  // bf16's precision (2^-8), not fp32's.
  expectMatchesReference(c, Wire::kInProcess, /*sgd_bound=*/4e-3);
  TrainConfig fp32 = c;
  fp32.precision = "fp32";
  const models::Model a = trainReference(c), b = trainReference(fp32);
  const int n = static_cast<int>(a.layers.size());
  EXPECT_GT(relativeError(a.parameters(0, n), b.parameters(0, n)), 1e-5);
}

// Which channel carries the data (openDataChannel): every rank decides alike from what
// all have; CPU ranks of one host sum in shared memory; NCCL asked for where it cannot
// serve is an error that says why.
TEST(Devices, NcclOnlyBetweenRanksWithGpusOfTheirOwn) {
  auto group = makeInProcessGroup(2, std::chrono::seconds(10));
  std::vector<std::string> chosen(2), refused(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      const Rendezvous rv{"127.0.0.1", 29400, r, 2, std::chrono::seconds(10), ""};
      const auto automatic = openDataChannel("auto", rv, torch::kCPU, *group[r]);
      chosen[r] = automatic ? automatic->name() : "the transport";
      if (openDataChannel("gloo", rv, torch::kCPU, *group[r])) chosen[r] += ", a channel for gloo";
      refused[r] = errorOf([&] { openDataChannel("nccl", rv, torch::kCPU, *group[r]); });
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(chosen[r], "in-process+shm");
    EXPECT_NE(refused[r].find(ncclBuilt() ? "rank 0 has no GPU" : "this build has no NCCL"), std::string::npos)
        << refused[r];
  }
}

TEST(Cuda, SynchronousSchedulesMatchSingleGpu) {
  REQUIRE_GPU();
  for (const auto& [model, config] : gpuModels())
    for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"})
      for (int ranks : {1, 2, 3}) {
        SCOPED_TRACE(model + " " + schedule + " ranks=" + std::to_string(ranks));
        TrainConfig c = onGpu(smallConfig(model, config));
        usePlan(c, schedule, std::vector<int>(ranks, 1));
        expectMatchesReference(c);
      }
}

// The schedules of more than one stage per rank and of deferred weight passes.
TEST(Cuda, EveryOtherSynchronousScheduleMatchesSingleGpu) {
  REQUIRE_GPU();
  const models::ModelConfig gpt{{"layers", 6}, {"width", 32}, {"heads", 2}, {"context", 8}};
  TrainConfig interleaved = onGpu(smallConfig("gpt", gpt));
  usePlan(interleaved, "interleaved", {1, 1}, 2);
  expectMatchesReference(interleaved);
  for (const std::string schedule : {"zb-h2", "zb-v", "dualpipev"}) {
    SCOPED_TRACE(schedule);
    TrainConfig c = onGpu(smallConfig("gpt", gpt));
    c.plan.microbatches = 4;  // DualPipeV's least on 2 ranks
    usePlan(c, schedule, {1, 1});
    expectMatchesReference(c);
  }
}

// 2BW's double buffer and PipeMare's one weight copy (PipeDream's stash: below).
TEST(Cuda, AsynchronousSchedulesMatchTheirStalenessRules) {
  REQUIRE_GPU();
  for (const std::string schedule : {"2bw", "pipemare"})
    for (int stages : {2, 3}) {
      SCOPED_TRACE(schedule + " stages=" + std::to_string(stages));
      TrainConfig c = onGpu(smallConfig("mlp", {{"input", 16}, {"layers", 6}, {"width", 32}}));
      c.plan.schedule.pipemare_lr_warmup = false;
      c.plan.schedule.pipemare_correction = false;
      usePlan(c, schedule, std::vector<int>(stages, 1));
      expectMatchesStalenessReference(c);
    }
}

// Adam's fused step on a GPU (runtime::makeOptimizer): a pipeline matches single-GPU
// training with it, and its update (AdamW's too) is LibTorch's per-tensor one within fp32 rounding.
TEST(Cuda, FusedAdamMatchesLibTorchAdam) {
  REQUIRE_GPU();
  TrainConfig c = onGpu(smallConfig("gpt", {{"layers", 4}, {"width", 32}, {"heads", 2}, {"context", 8}}));
  c.optimizer.name = "adam";
  c.lr = 1e-3;
  usePlan(c, "1f1b", {1, 1});
  expectMatchesReference(c);

  for (const std::string name : {"adam", "adamw"}) {
    torch::manual_seed(0);
    const torch::Device gpu("cuda");
    std::vector<torch::Tensor> fused, plain;
    for (const auto& shape : std::vector<std::vector<int64_t>>{{33, 7}, {5}, {128, 64}}) {
      fused.push_back(torch::randn(shape, gpu).requires_grad_(true));
      plain.push_back(fused.back().detach().clone().requires_grad_(true));
    }
    recipe::OptimizerOptions o;
    o.name = name;
    o.weight_decay = 0.1;
    const auto optimizer = makeOptimizer(o, 1e-2, fused);
    std::unique_ptr<torch::optim::Optimizer> reference;
    if (name == "adam")
      reference = std::make_unique<torch::optim::Adam>(plain, torch::optim::AdamOptions(1e-2).weight_decay(0.1));
    else
      reference = std::make_unique<torch::optim::AdamW>(plain, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
    for (int step = 0; step < 5; ++step) {
      for (std::size_t k = 0; k < fused.size(); ++k) {
        const torch::Tensor g = torch::randn_like(fused[k]);
        fused[k].mutable_grad() = g.clone();
        plain[k].mutable_grad() = g.clone();
      }
      optimizer->step();
      reference->step();
    }
    for (std::size_t k = 0; k < fused.size(); ++k) {
      EXPECT_LT((fused[k] - plain[k]).abs().max().item<double>(), 1e-6) << name << ", parameter " << k;
      EXPECT_EQ(optimizerState(*optimizer, fused[k]).at(name + ".step").item<int64_t>(), 5);
    }
  }
}

TEST(Cuda, PipeDreamMatchesItsStalenessRule) {
  REQUIRE_GPU();
  for (int stages : {1, 2, 3}) {
    TrainConfig c = onGpu(smallConfig("mlp", {{"input", 16}, {"layers", 6}, {"width", 32}}));
    usePlan(c, "pipedream", std::vector<int>(stages, 1));
    expectMatchesStalenessReference(c);
  }
}

// Ranks on one GPU over Gloo: every message and reduction through host memory.
TEST(Cuda, OverGlooThroughHostCopies) {
  REQUIRE_GPU();
  for (int ranks : {2, 3, 4}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    TrainConfig c = onGpu(smallConfig("gpt", {{"layers", 4}, {"width", 32}, {"heads", 2}, {"context", 8}}));
    usePlan(c, "1f1b", std::vector<int>(ranks, 1));
    expectMatchesReference(c, Wire::kGloo);
  }
  TrainConfig replicated = onGpu(smallConfig("mlp", {{"input", 16}, {"layers", 4}, {"width", 32}}));
  usePlan(replicated, "1f1b", {2, 1});  // the first stage's gradients all-reduced
  expectMatchesReference(replicated, Wire::kGloo);
  TrainConfig stale = onGpu(smallConfig("mlp", {{"input", 16}, {"layers", 6}, {"width", 32}}));
  usePlan(stale, "pipedream", {1, 1, 1});
  expectMatchesStalenessReference(stale, Wire::kGloo);
}

// NCCL carries the data between ranks on GPUs of their own (up to 3 of the machine's),
// Gloo coordinates: each schedule, a V placement and a replicated stage included, ends
// where single-GPU training does. On one GPU, one rank: the channel connects and its
// messages are none, yet the run goes through it.
TEST(Cuda, OverNcclBetweenGpus) {
  REQUIRE_GPU();
  if (!ncclBuilt()) GTEST_SKIP() << "this build has no NCCL";
  const int gpus = std::min(static_cast<int>(torch::cuda::device_count()), 3);
  ::testing::Test::RecordProperty("gpus", gpus);
  for (const std::string schedule : {"1f1b", "zb-h1", "zb-v", "dualpipev"}) {
    SCOPED_TRACE(schedule + " on " + std::to_string(gpus) + " GPUs");
    TrainConfig c = onGpu(smallConfig("gpt", {{"layers", 6}, {"width", 32}, {"heads", 2}, {"context", 8}}));
    usePlan(c, schedule, std::vector<int>(gpus, 1));
    expectMatchesReference(c, Wire::kNccl);
  }
  if (gpus == 3) {
    TrainConfig replicated = onGpu(smallConfig("mlp", {{"input", 16}, {"layers", 4}, {"width", 32}}));
    usePlan(replicated, "1f1b", {2, 1});  // the first stage's buckets all-reduced over NCCL
    expectMatchesReference(replicated, Wire::kNccl);
  }
  TrainConfig c = onGpu(smallConfig("mlp", {{"input", 16}, {"layers", 4}, {"width", 32}}));
  usePlan(c, "1f1b", std::vector<int>(gpus, 1));
  for (const RankResult& r : runInProcess(c, gpus, Wire::kNccl)) EXPECT_EQ(r.data_channel, "nccl");
}

TEST(Cuda, RanksReportTheirDeviceAndItsMemory) {
  REQUIRE_GPU();
  TrainConfig c = onGpu(smallConfig("mlp", {{"input", 16}, {"layers", 4}, {"width", 32}}));
  usePlan(c, "1f1b", {1, 1});
  for (const RankResult& r : runInProcess(c, 2)) {
    EXPECT_EQ(r.device.rfind("cuda:0", 0), 0u) << r.device;
    EXPECT_GT(r.peak_device_memory_bytes, 0);
    EXPECT_TRUE(r.parameters.front().is_cuda());
    for (const auto& a : r.action_seconds) EXPECT_GT(a.cpu_seconds, 0) << "device time of stage " << a.stage;
  }
}

}  // namespace
}  // namespace pipetrain::runtime
