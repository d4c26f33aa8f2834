// Pipelined training matches single-process training: for every synchronous schedule,
// the parameters after several optimizer steps equal the reference's within fp32
// tolerance. Ranks run as threads over the in-process transport.
#include <gtest/gtest.h>

#include <exception>
#include <thread>

#include <unistd.h>

#include "pipetrain/torch/trainer.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

// Ranks as threads, over the in-process transport or over real Gloo on loopback.
std::vector<RankResult> runInProcess(const TrainConfig& config, int ranks, bool gloo = false) {
  std::vector<std::unique_ptr<Transport>> group;
  if (!gloo) group = makeInProcessGroup(ranks, std::chrono::seconds(20));
  const int port = 29000 + static_cast<int>(::getpid() % 1000);
  std::vector<RankResult> results(ranks);
  std::vector<std::exception_ptr> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Transport> own;
        if (gloo) own = makeGlooTransport(Rendezvous{"127.0.0.1", port, r, ranks, std::chrono::seconds(20)});
        results[r] = trainRank(config, gloo ? *own : *group[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  // Report every rank's error: the first one to fail usually explains the others' timeouts.
  std::string messages;
  for (int r = 0; r < ranks; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      messages += "\n  rank " + std::to_string(r) + ": " + e.what();
    }
  }
  if (!messages.empty()) throw Error("training failed:" + messages);
  return results;
}

TrainConfig smallConfig(const std::string& model, models::ModelConfig model_config) {
  TrainConfig c;
  c.model = model;
  c.model_config = std::move(model_config);
  c.data.name = "synthetic";
  c.data.synthetic_size = 256;
  c.microbatches = 4;
  c.microbatch_size = 4;
  c.max_steps_per_epoch = 3;
  c.evaluate = false;
  c.threads = 1;
  c.optimizer = "adam";
  c.lr = 1e-3;
  return c;
}

// Largest |a - b| relative to the largest |b| over all parameters of the rank.
double relativeError(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want) {
  double diff = 0, scale = 0;
  EXPECT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, (got[i] - want[i]).abs().max().item<double>());
    scale = std::max(scale, want[i].abs().max().item<double>());
  }
  return diff / scale;
}

void expectMatchesReference(const TrainConfig& config, int ranks, bool gloo = false) {
  std::vector<RankResult> results;
  try {
    results = runInProcess(config, ranks, gloo);
  } catch (const std::exception& e) {
    ADD_FAILURE() << config.model << " " << config.schedule << " on " << ranks << " ranks: " << e.what();
    return;
  }
  models::Model reference = trainReference(config);
  for (const RankResult& r : results) {
    std::vector<torch::Tensor> want;
    for (int s : r.stages) {
      auto p = reference.parameters(r.stage_bounds[s], r.stage_bounds[s + 1]);
      want.insert(want.end(), p.begin(), p.end());
    }
    EXPECT_LT(relativeError(r.parameters, want), 1e-5) << config.model << " " << config.schedule << " rank " << r.rank;
  }
  // Training moved the weights: the comparison is not trivially true.
  models::Model initial = models::buildModel(config.model, config.model_config, config.seed);
  const int n = static_cast<int>(initial.layers.size());
  EXPECT_GT(relativeError(initial.parameters(0, n), reference.parameters(0, n)), 1e-4);
}

struct Case {
  std::string model;
  models::ModelConfig config;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"mlp", {{"input", 16}, {"layers", 4}, {"width", 32}}},
      {"fmnist-cnn", {{"channels", 4}, {"hidden", 16}}},
      {"gpt", {{"layers", 4}, {"width", 32}, {"heads", 2}, {"context", 8}}},
  };
  return all;
}

TEST(PipelineTraining, SynchronousSchedulesMatchSingleProcess) {
  for (const Case& m : cases())
    for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"})
      for (int ranks : {2, 3}) {
        SCOPED_TRACE(m.model + " " + schedule + " ranks=" + std::to_string(ranks));
        TrainConfig c = smallConfig(m.model, m.config);
        c.schedule = schedule;
        expectMatchesReference(c, ranks);
      }
}

TEST(PipelineTraining, InterleavedMatchesSingleProcess) {
  for (const Case& m : cases()) {
    SCOPED_TRACE(m.model);
    TrainConfig c = smallConfig(m.model, m.config);
    c.schedule = "interleaved";
    c.chunks = 2;
    expectMatchesReference(c, 2);
  }
}

TEST(PipelineTraining, OverGlooTooMatchesSingleProcess) {
  TrainConfig c = smallConfig("gpt", cases()[2].config);
  c.schedule = "1f1b";
  expectMatchesReference(c, 3, /*gloo=*/true);
}

TEST(PipelineTraining, SgdWithMomentumMatchesToo) {
  TrainConfig c = smallConfig("mlp", cases()[0].config);
  c.optimizer = "sgd";
  c.lr = 0.05;
  expectMatchesReference(c, 3);
}

TEST(PipelineTraining, ReplicatedStagesMatchSingleProcess) {
  // Data parallelism alone, and pipelines whose first or last stage is replicated.
  const std::vector<std::pair<std::vector<int>, std::string>> layouts = {
      {{2}, "1f1b"}, {{2, 1}, "1f1b"}, {{1, 2}, "zb-h1"}, {{2, 1}, "gpipe"}};
  for (const Case& m : {cases()[0], cases()[2]})
    for (const auto& [replicas, schedule] : layouts) {
      SCOPED_TRACE(m.model + " " + schedule + " replicas of stage 0: " + std::to_string(replicas[0]));
      TrainConfig c = smallConfig(m.model, m.config);
      c.schedule = schedule;
      c.stage_replicas = replicas;
      int ranks = 0;
      for (int r : replicas) ranks += r;
      expectMatchesReference(c, ranks);
    }
}

TEST(PipelineTraining, ReplicatedOverGlooToo) {
  TrainConfig c = smallConfig("mlp", cases()[0].config);
  c.stage_replicas = {2, 1};
  expectMatchesReference(c, 3, /*gloo=*/true);
}

TEST(PipelineTraining, ReplicatedLastStageCountsEveryTestSample) {
  TrainConfig c = smallConfig("mlp", cases()[0].config);
  c.stage_replicas = {1, 2};
  c.evaluate = true;
  const auto replicated = runInProcess(c, 3);
  c.stage_replicas = {};
  const auto single = runInProcess(c, 2);
  EXPECT_GE(single[1].test_accuracy, 0.0);
  EXPECT_NEAR(replicated[1].test_accuracy, single[1].test_accuracy, 1e-6);
  EXPECT_NEAR(replicated[2].test_accuracy, single[1].test_accuracy, 1e-6);
}

TEST(PipelineTraining, RefusesWhatItCannotRun) {
  TrainConfig c = smallConfig("mlp", cases()[0].config);
  c.schedule = "pipedream";
  EXPECT_THROW(checkConfig(c, 2), Error);
  c.schedule = "interleaved";
  c.chunks = 2;
  c.microbatches = 3;
  EXPECT_THROW(checkConfig(c, 2), Error);  // m must be a multiple of the ranks
  c = smallConfig("mlp", cases()[0].config);
  c.stage_bounds = {0, 2, 4, 5};
  EXPECT_THROW(checkConfig(c, 2), Error);  // three stages on two ranks
  c = smallConfig("mlp", cases()[0].config);
  c.stage_replicas = {2, 2};
  EXPECT_THROW(checkConfig(c, 3), Error);  // four replicas on three ranks
  c.microbatches = 3;
  EXPECT_THROW(checkConfig(c, 4), Error);  // two replicas cannot share three micro-batches
}

}  // namespace
}  // namespace pipetrain::runtime
