// Shared by the torch tests that train: ranks as threads, plans over a model's layers,
// and the comparison of trained parameters with the single-process reference.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>

#include <unistd.h>

#include "pipetrain/plan/partition.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/torch/device.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

// A file the byo_fixtures test wrote with Python: models and data as a user writes them.
inline std::string fixture(const std::string& name) { return std::string(PIPETRAIN_BYO_DIR) + "/" + name; }

// A small synchronous run: 3 steps of 4 micro-batches of 4 synthetic samples, plain SGD.
// SGD, because its update is linear in the gradient: the rounding that a pipeline's other
// order of operations brings stays at rounding size, so 1e-5 is a tight bound. Adam
// divides by sqrt(v) + eps, which turns rounding in a gradient element that cancels to
// about zero into an update difference of up to lr * rounding / eps (1e5 times larger at
// lr 1e-3, eps 1e-8); Adam runs are bounded against the step size instead (Discrepancy).
inline TrainConfig smallConfig(const std::string& model, models::ModelConfig model_config) {
  TrainConfig c;
  c.model = model;
  c.model_config = std::move(model_config);
  c.data.name = "synthetic";
  c.data.synthetic_size = 256;
  c.plan.microbatches = 4;
  c.plan.microbatch_size = 4;
  c.max_steps_per_epoch = 3;
  c.evaluate = false;
  c.threads = 1;
  c.optimizer.name = "sgd";
  c.lr = 0.05;
  return c;
}

// What the test's ranks talk over: the in-process transport (matching by tag, or by the
// order each pair posts in, as NCCL does), real Gloo on loopback, NCCL for the data
// (rank r on GPU r mod the GPUs) with Gloo coordinating, or the in-process transport with
// sums in shared memory.
enum class Wire { kInProcess, kInProcessInOrder, kGloo, kNccl, kShm };

// Ranks as threads.
// `timeout`: how long a rank waits for a peer before it gives up.
inline std::vector<RankResult> runInProcess(const TrainConfig& config, int ranks, Wire wire,
                                            const PipelineExecutor::WeightProbe& probe = {},
                                            std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const bool gloo = wire == Wire::kGloo || wire == Wire::kNccl;
  std::vector<std::unique_ptr<Transport>> group;
  if (!gloo) group = makeInProcessGroup(ranks, timeout, wire == Wire::kInProcessInOrder);
  const int port = 29000 + static_cast<int>(::getpid() % 1000);
  static std::atomic<int> runs{0};
  const std::string shm_token = "test-" + std::to_string(::getpid()) + "-" + std::to_string(runs++);
  std::vector<RankResult> results(ranks);
  std::vector<std::exception_ptr> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Transport> own;
        const Rendezvous rv{"127.0.0.1", port, r, ranks, timeout, ""};
        if (gloo) own = makeGlooTransport(rv);
        Transport& coordinator = gloo ? *own : *group[r];
        std::unique_ptr<DataChannel> data;
        if (wire == Wire::kNccl) data = makeNcclChannel(rv, rankDevice(config.device, r));
        if (wire == Wire::kShm) data = makeShmChannel(coordinator, shm_token, timeout);
        results[r] = trainRank(config, data ? *data : static_cast<DataChannel&>(coordinator), coordinator, {}, probe);
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

inline std::vector<RankResult> runInProcess(const TrainConfig& config, int ranks, bool gloo = false,
                                            const PipelineExecutor::WeightProbe& probe = {}) {
  return runInProcess(config, ranks, gloo ? Wire::kGloo : Wire::kInProcess, probe);
}

// The plan: `replicas.size()` ranks' stages (times `chunks` when looped, two in a V) of
// about equal layer counts, stage s on replicas[s] ranks.
inline void usePlan(TrainConfig& c, const std::string& schedule, std::vector<int> replicas, int chunks = 1) {
  const models::Model model = openModel(c);
  std::vector<std::string> names;
  for (const auto& l : model.layers) names.push_back(l.name);
  const int per_rank = schedule::stagesPerRank(schedule::traits(schedule), chunks);
  const int stages = static_cast<int>(replicas.size()) * per_rank;
  plan::ScheduleOptions options = c.plan.schedule;
  options.name = schedule;
  options.chunks = chunks;
  const auto bounds = plan::balancedChainSplit(std::vector<double>(names.size(), 1.0), stages);
  c.plan = plan::chainPlan(names, bounds, per_rank > 1 ? std::vector<int>{} : replicas, options, c.plan.microbatch_size,
                           c.plan.microbatches);
}

// The message of the Error `f` throws; "" when it throws none.
inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline int rankCount(const TrainConfig& c) { return static_cast<int>(plan::rankDeviceNames(c.plan).size()); }

// Largest |a - b| over all parameters of the rank.
inline double largestDifference(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want) {
  double diff = 0;
  EXPECT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    diff = std::max(diff, (got[i].cpu() - want[i].cpu()).abs().max().item<double>());  // either on any device
  return diff;
}

// Largest |a - b| relative to the largest |b| over all parameters of the rank.
inline double relativeError(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want) {
  double scale = 0;
  for (const torch::Tensor& w : want) scale = std::max(scale, w.abs().max().item<double>());
  return largestDifference(got, want) / scale;
}

// The reference's parameters of the stages a rank ran.
inline std::vector<torch::Tensor> stageParameters(const TrainConfig& config, const models::Model& reference,
                                           const RankResult& r) {
  const auto stages = stageLayers(config.plan, reference);
  std::vector<torch::Tensor> want;
  for (int s : r.stages) {
    auto p = reference.parameters(stages[s].layers);
    want.insert(want.end(), p.begin(), p.end());
  }
  return want;
}

// How far a rank's parameters are from the reference's, and the bound: relative, 1e-5,
// under SGD; under Adam in units of its step lr, a hundredth (see smallConfig: a wrong
// weight version or a lost micro-batch moves Adam's weights by a good part of lr, and
// rounding measured up to 0.6% of lr on the 6-layer mlp).
struct Discrepancy {
  double error, bound;
};
// `sgd_bound` replaces 1e-5 where the arithmetic rounds more coarsely (bf16).
inline Discrepancy discrepancy(const TrainConfig& config, const std::vector<torch::Tensor>& got,
                               const std::vector<torch::Tensor>& want, double sgd_bound = 1e-5) {
  if (config.optimizer.name != "sgd") return {largestDifference(got, want) / config.lr, 0.01};
  return {relativeError(got, want), sgd_bound};
}

inline void expectMatchesReference(const TrainConfig& config, Wire wire = Wire::kInProcess, double sgd_bound = 1e-5) {
  const int ranks = rankCount(config);
  const std::string& schedule = config.plan.schedule.name;
  std::vector<RankResult> results;
  try {
    results = runInProcess(config, ranks, wire);
  } catch (const std::exception& e) {
    ADD_FAILURE() << config.model << " " << schedule << " on " << ranks << " ranks: " << e.what();
    return;
  }
  models::Model reference = trainReference(config);
  double worst = 0;
  for (const RankResult& r : results) {
    const Discrepancy d = discrepancy(config, r.parameters, stageParameters(config, reference, r), sgd_bound);
    EXPECT_LT(d.error, d.bound) << config.model << " " << schedule << " rank " << r.rank;
    worst = std::max(worst, d.error);
  }
  // In --gtest_output's file: the figure behind each pass.
  char figure[32];
  std::snprintf(figure, sizeof figure, "%.2e", worst);
  ::testing::Test::RecordProperty((config.optimizer.name != "sgd" ? "max_error_in_steps_" : "max_relative_error_") + schedule,
                                  figure);
  // Training moved the weights: the comparison is not trivially true.
  models::Model initial = openModel(config);
  const int n = static_cast<int>(initial.layers.size());
  EXPECT_GT(relativeError(initial.parameters(0, n), reference.parameters(0, n)), 1e-4);
}

// Trains `config` pipelined and compares every rank with the single-process reference
// that replays the Program's staleness rule.
inline void expectMatchesStalenessReference(const TrainConfig& config, Wire wire = Wire::kInProcess) {
  const std::string label = config.model + " " + config.plan.schedule.name +
                            (config.plan.schedule.vertical_sync ? " (vertical sync)" : "") + " on " +
                            std::to_string(config.plan.numStages()) + " stages";
  std::vector<RankResult> results;
  try {
    results = runInProcess(config, rankCount(config), wire);
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": " << e.what();
    return;
  }
  const models::Model reference = trainStalenessReference(config);
  for (const RankResult& r : results)
    EXPECT_LT(relativeError(r.parameters, stageParameters(config, reference, r)), 1e-5) << label << " rank " << r.rank;
}

}  // namespace pipetrain::runtime
