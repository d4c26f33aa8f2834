// Pipelined training matches single-process training: for every synchronous schedule,
// the parameters after several optimizer steps equal the reference's within fp32
// tolerance. Ranks run as threads over the in-process transport.
#include <gtest/gtest.h>

#include <exception>
#include <map>
#include <mutex>
#include <tuple>
#include <thread>

#include <unistd.h>

#include "../core/expect_error.h"
#include "pipetrain/plan/partition.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/schedule/program_memory.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/schedule/staleness.h"
#include "pipetrain/torch/trainer.h"
#include "pipetrain/util/error.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

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
        usePlan(c, schedule, std::vector<int>(ranks, 1));
        expectMatchesReference(c);
      }
}

TEST(PipelineTraining, InterleavedMatchesSingleProcess) {
  for (const Case& m : cases()) {
    SCOPED_TRACE(m.model);
    TrainConfig c = smallConfig(m.model, m.config);
    usePlan(c, "interleaved", {1, 1}, 2);
    expectMatchesReference(c);
  }
}

TEST(PipelineTraining, NewestSchedulesMatchSingleProcess) {
  // ZB-H2 (deferred weight passes), and the V schedules: two stages per rank, the turn of
  // the V local to the last rank, DualPipeV's overlapped forward+backward pairs.
  std::vector<Case> models = cases();
  models.push_back({"mlp", {{"input", 16}, {"layers", 6}, {"width", 32}}});  // six stages on three ranks
  for (const Case& m : models)
    for (const std::string schedule : {"zb-h2", "zb-v", "dualpipev"})
      for (int ranks : {2, 3}) {
        const int stages = ranks * schedule::stagesPerRank(schedule::traits(schedule), 1);
        if (models::buildModel(m.model, m.config, 0).layers.size() < static_cast<std::size_t>(stages)) continue;
        SCOPED_TRACE(m.model + " " + schedule + " ranks=" + std::to_string(ranks));
        TrainConfig c = smallConfig(m.model, m.config);
        c.plan.microbatches = 2 * ranks;  // DualPipeV's least
        usePlan(c, schedule, std::vector<int>(ranks, 1));
        expectMatchesReference(c);
      }
}

TEST(PipelineTraining, OverGlooTooMatchesSingleProcess) {
  TrainConfig c = smallConfig("gpt", cases()[2].config);
  usePlan(c, "1f1b", {1, 1, 1});
  expectMatchesReference(c, Wire::kGloo);
  c.plan.microbatches = 4;
  usePlan(c, "dualpipev", {1, 1});
  expectMatchesReference(c, Wire::kGloo);
}

TEST(PipelineTraining, AdamMatchesWithinAHundredthOfAStep) {
  // Bounded in units of Adam's step (Discrepancy in the harness).
  std::vector<Case> models = cases();
  models.push_back({"mlp", {{"input", 16}, {"layers", 6}, {"width", 32}}});
  for (const Case& m : models)
    for (const std::string schedule : {"1f1b", "zb-h2"}) {
      SCOPED_TRACE(m.model + " " + schedule);
      TrainConfig c = smallConfig(m.model, m.config);
      c.optimizer.name = "adam";
      c.lr = 1e-3;
      usePlan(c, schedule, {1, 1});
      expectMatchesReference(c);
    }
}

TEST(PipelineTraining, ReplicatedStagesMatchSingleProcess) {
  // Data parallelism alone, and pipelines whose first or last stage is replicated.
  const std::vector<std::pair<std::vector<int>, std::string>> layouts = {
      {{2}, "1f1b"}, {{2, 1}, "1f1b"}, {{1, 2}, "zb-h1"}, {{2, 1}, "gpipe"}};
  for (const Case& m : {cases()[0], cases()[2]})
    for (const auto& [replicas, schedule] : layouts) {
      SCOPED_TRACE(m.model + " " + schedule + " replicas of stage 0: " + std::to_string(replicas[0]));
      TrainConfig c = smallConfig(m.model, m.config);
      usePlan(c, schedule, replicas);
      expectMatchesReference(c);
    }
}

TEST(PipelineTraining, UnevenReplicaSharesMatchSingleProcess) {
  // Three replicas of four micro-batches (2, 1, 1 of the first mini-batch, the extra one
  // moving from replica to replica), and two of three: every STEP still applies the mean
  // gradient of the whole mini-batch.
  const std::vector<std::tuple<std::vector<int>, std::string, int>> layouts = {
      {{3}, "1f1b", 4}, {{2, 1}, "gpipe", 3}, {{1, 3}, "zb-h1", 4}};
  for (const auto& [replicas, schedule, microbatches] : layouts) {
    SCOPED_TRACE(schedule + " on " + std::to_string(replicas.size()) + " stage(s), m = " + std::to_string(microbatches));
    TrainConfig c = smallConfig("mlp", cases()[0].config);
    c.plan.microbatches = microbatches;
    usePlan(c, schedule, replicas);
    expectMatchesReference(c);
  }
}

TEST(PipelineTraining, ReplicasReportTheWholeMinibatchLoss) {
  // Each replica of a replicated last stage computes the loss of its own micro-batches;
  // what every one of them reports for a mini-batch is the mean over all of them, the
  // loss one process computes (not one replica's share, 3.1159 against 3.0856 before).
  const std::vector<std::tuple<std::vector<int>, std::string, Wire>> layouts = {
      {{3}, "1f1b", Wire::kInProcess}, {{1, 2}, "zb-h1", Wire::kInProcess}, {{2}, "gpipe", Wire::kGloo}};
  for (const auto& [replicas, schedule, wire] : layouts) {
    SCOPED_TRACE(schedule + " on " + std::to_string(replicas.size()) + " stage(s)");
    TrainConfig c = smallConfig("mlp", cases()[0].config);
    TrainConfig one = c;
    usePlan(one, "1f1b", {1});
    const double want = runInProcess(one, 1, Wire::kInProcess).at(0).final_loss;
    usePlan(c, schedule, replicas);
    int last_stage_ranks = 0;
    for (const RankResult& r : runInProcess(c, rankCount(c), wire)) {
      if (!r.last_stage) continue;
      ++last_stage_ranks;
      EXPECT_NEAR(r.final_loss / want, 1.0, 1e-5) << "rank " << r.rank;
    }
    EXPECT_EQ(last_stage_ranks, replicas.back());
  }
}

TEST(PipelineTraining, EachRankReportsItsComputePerMinibatchPastTheWarmUp) {
  // 6 mini-batches, the first 2 the warm-up: 4 figures on each rank, of every replica
  // alike (job::slowestReplicaSeconds sets them side by side), within its compute.
  TrainConfig c = smallConfig("mlp", cases()[0].config);
  c.max_steps_per_epoch = 6;
  usePlan(c, "1f1b", {2, 1});
  for (const RankResult& r : runInProcess(c, rankCount(c), Wire::kInProcess)) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    ASSERT_EQ(r.minibatch_busy_seconds.size(), 4u);
    ASSERT_EQ(r.minibatch_busy_cpu_seconds.size(), 4u);
    double sum = 0;
    for (double b : r.minibatch_busy_seconds) EXPECT_GT(b, 0), sum += b;
    EXPECT_LE(sum, r.busy_seconds + 1e-9);
  }
}

TEST(PipelineTraining, ReplicatedOverGlooToo) {
  TrainConfig c = smallConfig("mlp", cases()[0].config);
  usePlan(c, "1f1b", {2, 1});
  expectMatchesReference(c, Wire::kGloo);
}

TEST(PipelineTraining, ReplicatedLastStageCountsEveryTestSample) {
  TrainConfig c = smallConfig("mlp", cases()[0].config);
  c.evaluate = true;
  usePlan(c, "1f1b", {1, 2});
  const auto replicated = runInProcess(c, 3);
  usePlan(c, "1f1b", {1, 1});
  const auto single = runInProcess(c, 2);
  EXPECT_GE(single[1].test_accuracy, 0.0);
  EXPECT_NEAR(replicated[1].test_accuracy, single[1].test_accuracy, 1e-6);
  EXPECT_NEAR(replicated[2].test_accuracy, single[1].test_accuracy, 1e-6);
}

TEST(PipelineTraining, RefusesWhatItCannotRun) {
  TrainConfig c = smallConfig("mlp", cases()[0].config);
  usePlan(c, "interleaved", {1, 1}, 2);
  c.plan.microbatches = 3;
  EXPECT_THROW(checkConfig(c, openModel(c), 2), Error);  // m must be a multiple of the ranks
  c = smallConfig("mlp", cases()[0].config);
  usePlan(c, "1f1b", {1, 1, 1});
  EXPECT_THROW(checkConfig(c, openModel(c), 2), Error);  // three stages on two ranks
  usePlan(c, "1f1b", {2, 2});
  EXPECT_THROW(checkConfig(c, openModel(c), 3), Error);  // four replicas on three ranks
  c.plan.microbatches = 1;
  EXPECT_THROW(checkConfig(c, openModel(c), 4), Error);  // two replicas cannot share one micro-batch
  usePlan(c, "pipedream", {2, 2});
  c.plan.microbatches = 3;
  EXPECT_THROW(checkConfig(c, openModel(c), 4), Error);  // nor three, stepping after every round of two
  c = smallConfig("mlp", cases()[0].config);
  usePlan(c, "1f1b", {1, 1});
  std::swap(c.plan.stages[0].layers[0], c.plan.stages[1].layers[0]);
  EXPECT_THROW(checkConfig(c, openModel(c), 2), Error);  // stages must be convex
}

TEST(PipelineTraining, OutgoingMessagesAreReleasedWithinAnEpoch) {
  // An epoch is one Program: payloads of delivered sends must not pile up to its end
  // (they once grew a rank by megabytes per mini-batch).
  for (const std::string schedule : {"1f1b", "pipedream"}) {
    TrainConfig c = smallConfig("mlp", cases()[0].config);
    c.max_steps_per_epoch = 40;
    usePlan(c, schedule, {1, 1, 1});
    for (const RankResult& r : runInProcess(c, 3))
      EXPECT_LE(r.max_sends_held, 2 * c.plan.microbatches) << schedule << " rank " << r.rank << " of 160 sends";
  }
}

// --- asynchronous schedules --------------------------------------------------------

TrainConfig asyncConfig(const std::string& schedule, int stages) {
  TrainConfig c = smallConfig("mlp", {{"input", 16}, {"layers", 6}, {"width", 32}});
  c.plan.schedule.pipemare_lr_warmup = false;
  c.plan.schedule.pipemare_correction = false;
  usePlan(c, schedule, std::vector<int>(stages, 1));
  return c;
}

TEST(AsynchronousTraining, MatchesTheReferenceOfItsStalenessRule) {
  for (int stages : {2, 3, 4})
    for (const std::string schedule : {"pipedream", "2bw", "pipemare"}) {
      TrainConfig c = asyncConfig(schedule, stages);
      expectMatchesStalenessReference(c);
    }
  {  // weights wider than the stash swap's 64 KiB block: 150 x 150 floats, a block and a part
    TrainConfig c = smallConfig("mlp", {{"input", 16}, {"layers", 2}, {"width", 150}});
    usePlan(c, "2bw", {1, 1, 1});
    expectMatchesStalenessReference(c);
  }
  for (int stages : {2, 3, 4}) {
    TrainConfig c = asyncConfig("pipedream", stages);
    c.plan.schedule.vertical_sync = true;
    usePlan(c, "pipedream", std::vector<int>(stages, 1));
    expectMatchesStalenessReference(c);
  }
}

TEST(AsynchronousTraining, StalenessIsRealNotSynchronousSgd) {
  // The async reference differs from synchronous training, so matching it says something.
  TrainConfig c = asyncConfig("2bw", 3);
  const models::Model stale = trainStalenessReference(c);
  const models::Model sync = trainReference(c);
  const int n = static_cast<int>(sync.layers.size());
  EXPECT_GT(relativeError(stale.parameters(0, n), sync.parameters(0, n)), 1e-5);
  // ... and for a flushing schedule the staleness reference is synchronous training.
  usePlan(c, "1f1b", {1, 1, 1});
  EXPECT_LT(relativeError(trainStalenessReference(c).parameters(0, n), sync.parameters(0, n)), 1e-5);
}

TEST(AsynchronousTraining, OverGlooAndWithReplicas) {
  TrainConfig c = asyncConfig("pipedream", 3);
  expectMatchesStalenessReference(c, Wire::kGloo);
  // PipeDream's 1F1B-RR: a replicated input stage, both replicas stepping every round.
  for (const std::string schedule : {"pipedream", "2bw"}) {
    c = asyncConfig(schedule, 2);
    usePlan(c, schedule, {2, 1});
    expectMatchesStalenessReference(c);
  }
  c = asyncConfig("pipedream", 2);
  c.plan.schedule.vertical_sync = true;
  usePlan(c, "pipedream", {2, 1});
  expectMatchesStalenessReference(c);
}

// A fingerprint of the weights an action read.
double fingerprint(const std::vector<torch::Tensor>& params) {
  double sum = 0;
  for (std::size_t i = 0; i < params.size(); ++i) sum += (i + 1) * params[i].sum().item<double>();
  return sum;
}

struct ProbeLog {
  std::mutex mutex;
  std::map<std::tuple<int, int, int>, double> seen;  // (type, stage, micro-batch) -> fingerprint
  PipelineExecutor::WeightProbe probe() {
    return [this](const schedule::Action& a, const std::vector<torch::Tensor>& params) {
      std::lock_guard<std::mutex> lock(mutex);
      seen[{static_cast<int>(a.type), a.stage, a.microbatch}] = fingerprint(params);
    };
  }
  double at(schedule::ActionType t, int s, int j) const { return seen.at({static_cast<int>(t), s, j}); }
};

TEST(AsynchronousTraining, EveryBackwardReadsItsForwardsWeights) {
  for (const bool vertical : {false, true}) {
    TrainConfig c = asyncConfig("pipedream", 3);
    c.plan.schedule.vertical_sync = vertical;
    usePlan(c, "pipedream", {1, 1, 1});
    ProbeLog log;
    runInProcess(c, 3, false, log.probe());
    const int total = c.plan.microbatches * static_cast<int>(c.max_steps_per_epoch);
    int stale = 0;
    for (int s = 0; s < 3; ++s)
      for (int j = 0; j < total; ++j) {
        const double f = log.at(schedule::ActionType::F, s, j);
        EXPECT_EQ(log.at(schedule::ActionType::B, s, j), f) << "stage " << s << " micro-batch " << j;
        if (j > 0 && f != log.at(schedule::ActionType::F, s, j - 1)) ++stale;
      }
    EXPECT_GT(stale, 0) << "the weights changed between forwards, so stashing was exercised";
  }
  // Without stashing (PipeMare, no correction) a backward reads newer weights than its forward.
  TrainConfig c = asyncConfig("pipemare", 2);
  ProbeLog log;
  runInProcess(c, 2, false, log.probe());
  int newer = 0;
  for (int j = 0; j < 12; ++j)
    newer += log.at(schedule::ActionType::B, 0, j) != log.at(schedule::ActionType::F, 0, j);
  EXPECT_GT(newer, 0);
}

TEST(AsynchronousTraining, WeightVersionsHeldEqualTheProgramsAccounting) {
  for (const std::string schedule : {"pipedream", "2bw", "pipemare", "1f1b"})
    for (const bool vertical : {false, true}) {
      if (vertical && schedule != "pipedream") continue;
      TrainConfig c = asyncConfig(schedule, 4);
      c.plan.schedule.vertical_sync = vertical;
      usePlan(c, schedule, {1, 1, 1, 1});
      const auto results = runInProcess(c, 4);
      const schedule::Program program =
          plan::programForPlan(c.plan, schedule::chainDag(4), static_cast<int>(c.max_steps_per_epoch));
      const auto footprint = schedule::accountMemory(program);
      for (const RankResult& r : results)
        EXPECT_EQ(r.weight_versions, footprint[r.rank].weight_versions) << schedule << " vs=" << vertical << " rank " << r.rank;
    }
}

// A linear warm-up of the learning rate (TrainConfig::lr_schedule) counts each
// stage's own steps: a mini-batch under the synchronous schedules and 2BW, a micro-batch
// under PipeDream; it multiplies PipeMare's T1.
TEST(AsynchronousTraining, LearningRateWarmUpMatchesItsReferences) {
  TrainConfig c = smallConfig("mlp", cases()[0].config);
  usePlan(c, "1f1b", {1, 1});
  const models::Model plain = trainReference(c);
  c.lr_schedule.warmup_steps = 3;
  const models::Model warmed = trainReference(c);
  const int n = static_cast<int>(plain.layers.size());
  EXPECT_GT(relativeError(warmed.parameters(0, n), plain.parameters(0, n)), 1e-4);  // it changes training
  expectMatchesReference(c);
  for (const std::string schedule : {"pipedream", "2bw", "pipemare"}) {
    TrainConfig a = asyncConfig(schedule, 3);
    a.lr_schedule.warmup_steps = 5;
    a.plan.schedule.pipemare_lr_warmup = schedule == "pipemare";
    a.plan.schedule.pipemare_warmup_steps = 2;
    usePlan(a, schedule, {1, 1, 1});
    expectMatchesStalenessReference(a);
    TrainConfig cold = a;
    cold.lr_schedule.warmup_steps = 0;
    const models::Model stale_warmed = trainStalenessReference(a), stale_cold = trainStalenessReference(cold);
    const int layers = static_cast<int>(stale_cold.layers.size());
    EXPECT_GT(relativeError(stale_warmed.parameters(0, layers), stale_cold.parameters(0, layers)), 1e-4) << schedule;
  }
}

TEST(AsynchronousTraining, PipeMareT1MatchesTheReferenceAndT2TheFormula) {
  TrainConfig c = asyncConfig("pipemare", 3);
  c.plan.schedule.pipemare_lr_warmup = true;
  c.plan.schedule.pipemare_warmup_steps = 2;
  usePlan(c, "pipemare", {1, 1, 1});
  expectMatchesStalenessReference(c);

  // T2: a backward pass reads u = w - tau * delta, delta the moving average of the
  // stage's updates with decay gamma = D^(1/delay).
  c.plan.schedule.pipemare_correction = true;
  c.plan.schedule.pipemare_decay = 0.5;
  usePlan(c, "pipemare", {1, 1, 1});
  expectMatchesStalenessReference(c);  // the replay's T2 is the executor's
  struct Seen {
    std::vector<torch::Tensor> weights;
    schedule::Action action;
  };
  std::mutex mutex;
  std::vector<Seen> stage0;
  runInProcess(c, 3, false, [&](const schedule::Action& a, const std::vector<torch::Tensor>& params) {
    if (a.stage != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<torch::Tensor> copy;
    for (const auto& p : params) copy.push_back(p.detach().clone());
    stage0.push_back({copy, a});
  });
  const schedule::Program program =
      plan::programForPlan(c.plan, schedule::chainDag(3), static_cast<int>(c.max_steps_per_epoch));
  const double gamma = schedule::correctionDecay(0.5, schedule::stageDelays(program)[0]);
  // Every forward reads the current weights: the versions w_v in order, and delta_v.
  std::map<int, std::vector<torch::Tensor>> w, delta;
  std::map<int, int> forward_version;
  int checked = 0;
  for (const Seen& e : stage0) {
    const int v = e.action.version;
    if (e.action.type == schedule::ActionType::F) {
      forward_version[e.action.microbatch] = v;
      if (w.count(v)) continue;
      w[v] = e.weights;
      if (v == 0) {
        for (const auto& t : e.weights) delta[0].push_back(torch::zeros_like(t));
      } else {
        ASSERT_TRUE(w.count(v - 1)) << "version " << v - 1 << " was never read";
        for (std::size_t i = 0; i < e.weights.size(); ++i)
          delta[v].push_back(gamma * delta[v - 1][i] + (1 - gamma) * (w[v][i] - w[v - 1][i]));
      }
      continue;
    }
    const int tau = v - forward_version.at(e.action.microbatch);
    if (tau == 0 || !w.count(v)) continue;
    std::vector<torch::Tensor> expected;
    for (std::size_t i = 0; i < e.weights.size(); ++i) expected.push_back(w[v][i] - tau * delta[v][i]);
    EXPECT_LT(relativeError(e.weights, expected), 1e-5) << "backward of micro-batch " << e.action.microbatch;
    ++checked;
  }
  EXPECT_GT(checked, 3);
}

}  // namespace
}  // namespace pipetrain::runtime
