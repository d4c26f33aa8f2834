// Stage graphs of multi-branch models: branches on their own ranks, activations fanning
// in (and out), gradients summed, trained exactly as one process trains the model.
#include <gtest/gtest.h>

#include <thread>

#include "pipetrain/schedule/schedules.h"

#include "../core/expect_error.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

// A plan whose stage s holds `stages[s]` (layer names) on `replicas[s]` ranks.
void useGraphPlan(TrainConfig& c, const std::string& schedule, const std::vector<std::vector<std::string>>& stages,
                  std::vector<int> replicas = {}) {
  if (replicas.empty()) replicas.assign(stages.size(), 1);
  plan::Plan p;
  p.microbatch_size = c.plan.microbatch_size;
  p.microbatches = c.plan.microbatches;
  p.schedule.name = schedule;
  int next = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    plan::Stage stage{stages[s], {}};
    for (int k = 0; k < replicas[s]; ++k) stage.devices.push_back("dev" + std::to_string(next++));
    p.stages.push_back(stage);
  }
  c.plan = p;
}

TrainConfig fmnistBranch() { return smallConfig("fmnist-branch", {{"channels", 2}, {"hidden", 8}}); }

TrainConfig dlrm() {
  return smallConfig("dlrm", {{"dense", 5}, {"tables", 4}, {"rows", 20}, {"dim", 4}, {"hidden", 8}});
}

TEST(StageGraphTraining, BranchesOnTheirOwnRanksMatchOneProcess) {
  // The conv branch and the MLP branch side by side, joined by the fusion stage.
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"}) {
    TrainConfig c = fmnistBranch();
    useGraphPlan(c, schedule, {{"conv1", "conv2"}, {"mlp"}, {"fusion", "head"}});
    expectMatchesReference(c);
  }
}

TEST(StageGraphTraining, SeveralTensorsPerMessageAndThreeWayFanIn) {
  // Two tables per stage: their outputs travel packed; the interaction reads three stages.
  TrainConfig c = dlrm();
  useGraphPlan(c, "1f1b", {{"bottom0", "bottom1"}, {"table0", "table1"}, {"table2", "table3"},
                           {"interaction", "top0", "head"}});
  expectMatchesReference(c);
}

TEST(StageGraphTraining, AReplicatedBranchOverGloo) {
  TrainConfig c = fmnistBranch();
  useGraphPlan(c, "1f1b", {{"conv1", "conv2"}, {"mlp"}, {"fusion", "head"}}, {1, 2, 1});
  expectMatchesReference(c, Wire::kGloo);
}

TEST(StageGraphTraining, AsynchronousStageGraphsMatchTheirStalenessRule) {
  TrainConfig c = fmnistBranch();
  useGraphPlan(c, "pipedream", {{"conv1"}, {"conv2"}, {"mlp"}, {"fusion", "head"}});
  c.optimizer.name = "sgd";
  const std::vector<RankResult> results = runInProcess(c, rankCount(c));
  const models::Model reference = trainStalenessReference(c);
  for (const RankResult& r : results)
    EXPECT_LT(relativeError(r.parameters, stageParameters(c, reference, r)), 1e-5) << "rank " << r.rank;
}

TEST(StageGraphTraining, StagesMustBeConvex) {
  TrainConfig c = fmnistBranch();
  // conv1 -> conv2 -> fusion: a stage of conv1 and fusion without conv2 is not convex.
  useGraphPlan(c, "1f1b", {{"conv1", "fusion", "head"}, {"conv2"}, {"mlp"}});
  testing::expectError([&] { checkConfig(c, openModel(c), 3); }, {"convex"});
}

// x -> a; a -> b; (a, b) -> c. Stage {a} sends to both later stages, and its backward
// pass sums the gradients both send back.
models::Model fanOutModel() {
  torch::manual_seed(3);
  namespace nn = torch::nn;
  models::Model m;
  m.name = "fan-out";
  m.input = {models::InputKind::kFeatures, {4}, 3};
  m.layers.push_back({"a", "linear", nn::AnyModule(nn::Linear(4, 4))});
  m.layers.push_back({"b", "linear", nn::AnyModule(nn::Linear(4, 4))});
  m.layers.push_back({"c", "linear", nn::AnyModule(nn::Linear(8, 3)), {"a", "b"}});
  models::checkWiring(m);
  return m;
}

TEST(StageGraphTraining, AnOutputReadByTwoStagesGetsBothGradients) {
  const int m = 4, b = 2;
  torch::manual_seed(9);
  const torch::Tensor x = torch::randn({m * b, 4});
  const torch::Tensor y = torch::randint(0, 3, {m * b});
  auto sgd = [](int, std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(std::move(p), torch::optim::SGDOptions(0.5));
  };
  // One process: the mean loss over the mini-batch, one step.
  models::Model reference = fanOutModel();
  auto optimizer = sgd(0, reference.parameters(0, 3));
  models::lossOf(reference, models::forwardModel(reference, x), y).backward();
  optimizer->step();

  schedule::ScheduleSpec spec;
  spec.name = "1f1b";
  spec.microbatches = m;
  const schedule::Program program = schedule::buildProgram(spec, {{{}, {0}, {0, 1}}, {{1, 2}, {2}, {}}});
  std::vector<models::Model> models = {fanOutModel(), fanOutModel(), fanOutModel()};
  auto group = makeInProcessGroup(3, std::chrono::seconds(20));
  std::vector<std::vector<torch::Tensor>> trained(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      try {
        PipelineExecutor executor(program, r, models[r], {{{0}}, {{1}}, {{2}}}, b, *group[r], sgd);
        MicrobatchData data{[&](int j) { return x.narrow(0, j * b, b); }, [&](int j) { return y.narrow(0, j * b, b); },
                            {}};
        executor.run(program, data, Clock::now());
        trained[r] = executor.parameters();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    EXPECT_LT(relativeError(trained[r], reference.parameters(r, r + 1)), 1e-6) << "stage " << r;
  }
  EXPECT_GT(relativeError(fanOutModel().parameters(0, 1), reference.parameters(0, 1)), 1e-3);  // it trained
}

}  // namespace
}  // namespace pipetrain::runtime
