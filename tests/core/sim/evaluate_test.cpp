// The steady-state report: extrapolated from two shorter mini-batches where a plan has
// many micro-batches, it must agree with simulating every one of them.
#include "pipetrain/sim/evaluate.h"

#include <gtest/gtest.h>

#include "pipetrain/graph/heap_share.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"

namespace pipetrain::sim {
namespace {

// Six layers of uneven cost on six devices: groups of three joined fast, slower between.
graph::LayerGraph unevenChain() {
  std::vector<graph::Layer> layers;
  const double forward[] = {1.0e-3, 1.7e-3, 0.6e-3, 1.3e-3, 0.9e-3, 1.1e-3};
  for (int i = 0; i < 6; ++i) {
    graph::Layer l;
    l.name = "layer" + std::to_string(i);
    if (i > 0) l.inputs = {layers.back().name};
    l.forward_seconds = forward[i];
    l.backward_input_seconds = 1.2 * forward[i];
    l.backward_weight_seconds = 0.8 * forward[i];
    l.output_bytes = l.saved_activation_bytes = (i + 1) << 18;
    l.param_bytes = 1 << 20;
    l.optimizer_state_bytes = 2 << 20;
    l.optimizer_seconds = 1e-4;
    layers.push_back(l);
  }
  return graph::LayerGraph(layers, 1);
}

cluster::ClusterSpec sixDevices() {
  std::vector<cluster::Device> devices;
  for (int d = 0; d < 6; ++d) devices.push_back({"gpu" + std::to_string(d), "gpu", 1.0, int64_t{1} << 40});
  return cluster::ClusterSpec(devices, {{"node", 3, 2e9, 1e-5}, {"cluster", 6, 2e8, 5e-5}}, {});
}

// Under a schedule whose rank runs one stage: three stages of two layers on 2, 1 and 3
// replicas where the schedule replicates, else one device each. Under interleaved (3
// chunks on 2 ranks) and the V schedules (3 ranks): each layer a stage, placed as the
// schedule places them.
plan::Plan planFor(const std::string& name, const cluster::ClusterSpec& cluster, int microbatches) {
  const schedule::ScheduleTraits& t = schedule::traits(name);
  plan::Plan p;
  p.microbatches = microbatches;
  p.schedule.name = name;
  if (schedule::multiStage(t)) {
    p.schedule.chunks = t.placement == schedule::Placement::kLooped ? 3 : 1;
    const int ranks = 6 / schedule::stagesPerRank(t, p.schedule.chunks);
    for (int s = 0; s < 6; ++s)
      p.stages.push_back({{"layer" + std::to_string(s)}, {cluster.device(schedule::placedRank(t.placement, s, ranks)).name}});
    return p;
  }
  const std::vector<std::vector<int>> devices =
      t.replicable ? std::vector<std::vector<int>>{{0, 1}, {2}, {3, 4, 5}} : std::vector<std::vector<int>>{{0}, {1}, {2}};
  for (int s = 0; s < 3; ++s) {
    plan::Stage stage{{"layer" + std::to_string(2 * s), "layer" + std::to_string(2 * s + 1)}, {}};
    for (int d : devices[s]) stage.devices.push_back(cluster.device(d).name);
    p.stages.push_back(stage);
  }
  return p;
}

// A stage's backward passes run its layers last to first. B frees each layer's saved
// activations behind it, so only a late layer's transient can top what the pass started
// with; I frees none and keeps W's gradients and each layer output's gradient.
TEST(Evaluate, BackwardPeaksFollowTheLayersLastToFirst) {
  std::vector<graph::Layer> layers;
  const int64_t peak[] = {130, 160, 150}, split[] = {120, 110, 130}, split_peak[] = {200, 180, 170},
                weight_peak[] = {20, 70, 25};
  for (int i = 0; i < 3; ++i) {
    graph::Layer l;
    l.name = "layer" + std::to_string(i);
    if (i > 0) l.inputs = {layers.back().name};
    l.forward_seconds = l.backward_input_seconds = l.backward_weight_seconds = 1e-3;
    l.output_bytes = 10;
    l.saved_activation_bytes = 100;
    l.peak_memory_bytes = peak[i];
    l.split_activation_bytes = split[i];
    l.split_peak_memory_bytes = split_peak[i];
    l.param_bytes = 10;
    l.weight_peak_memory_bytes = weight_peak[i];
    layers.push_back(l);
  }
  const graph::LayerGraph graph(layers, 1);
  const cluster::ClusterSpec cluster = cluster::ClusterSpec::uniform(1, int64_t{1} << 30, 1e9, 0);
  plan::Plan p;
  p.microbatch_size = 2;  // twice the profiled batch: every figure doubles
  p.microbatches = 1;
  p.schedule.name = "1f1b";
  p.stages = {{{"layer0", "layer1", "layer2"}, {cluster.device(0).name}}};
  const CostModel costs(graph, cluster, p);
  const StageCosts& c = costs.stage(0);
  // B: layer2's 10 of weight gradients and 2 x 40 with everything still saved; layer1's
  // 10 + 2 x 50 comes after 200 freed.
  EXPECT_DOUBLE_EQ(c.backward_peak_bytes, 90.0);
  // I at layer0: layer2 kept 2 x (130 + 10 - 100), layer1 2 x (110 + 10 - 100), its own 2 x 100.
  EXPECT_DOUBLE_EQ(c.input_backward_peak_bytes, 320.0);
  // W at layer1: layer2's gradients (10), its own (10) and its 2 x (70 - 10) passing.
  EXPECT_DOUBLE_EQ(c.weight_peak_bytes, 140.0);
  // Unmeasured peaks price nothing.
  for (auto& l : layers) l.peak_memory_bytes = l.split_peak_memory_bytes = l.weight_peak_memory_bytes = -1;
  const graph::LayerGraph unmeasured_graph(layers, 1);
  const CostModel unmeasured(unmeasured_graph, cluster, p);
  EXPECT_DOUBLE_EQ(unmeasured.stage(0).backward_peak_bytes, 0.0);
  EXPECT_DOUBLE_EQ(unmeasured.stage(0).input_backward_peak_bytes, 120.0);  // the later layers' kept gradients
  EXPECT_DOUBLE_EQ(unmeasured.stage(0).weight_peak_bytes, 30.0);  // the weight gradients alone
}

// 2BW swaps its stashed version in and back around every pass and copies it aside at
// each STEP: a one-stage plan's steady mini-batch pays both, as the profile priced them.
TEST(Evaluate, TwoBwPaysForItsWeightVersions) {
  const std::vector<graph::Layer> uncopied = unevenChain().layers();
  std::vector<graph::Layer> layers = uncopied;
  const cluster::ClusterSpec cluster = cluster::ClusterSpec::uniform(1, int64_t{1} << 40, 1e9, 0);
  plan::Plan p;
  p.microbatch_size = 1;
  p.microbatches = 4;
  p.schedule.name = "2bw";
  plan::Stage stage;
  for (const graph::Layer& l : layers) stage.layers.push_back(l.name);
  stage.devices = {cluster.device(0).name};
  p.stages = {stage};
  const double plain = evaluatePlan(graph::LayerGraph(layers, 1), cluster, p).report.iteration_time;
  for (graph::Layer& l : layers) l.weight_versions = {1e-4, 2e-4, 0};
  const double copied = evaluatePlan(graph::LayerGraph(layers, 1), cluster, p).report.iteration_time;
  // Per mini-batch: 4 F and 4 B, each with two swaps of 6 x 0.1 ms, and one copy of 6 x 0.2 ms.
  EXPECT_NEAR(copied - plain, 8 * 2 * 6e-4 + 12e-4, 1e-9);
  // Under 1F1B the same profile copies nothing.
  p.schedule.name = "1f1b";
  EXPECT_NEAR(evaluatePlan(graph::LayerGraph(layers, 1), cluster, p).report.iteration_time,
              evaluatePlan(graph::LayerGraph(uncopied, 1), cluster, p).report.iteration_time, 1e-12);
}

// The layers' backward figures are net of the engine's call, and a stage's B, I and W
// each make one: six layers in one stage pay it once per action, not six times.
TEST(Evaluate, EachBackwardActionPaysOneEngineCall) {
  graph::LayerGraph graph = unevenChain();
  const cluster::ClusterSpec cluster = cluster::ClusterSpec::uniform(1, int64_t{1} << 40, 1e9, 0);
  plan::Plan p;
  p.microbatch_size = 1;
  p.microbatches = 4;
  plan::Stage stage;
  for (const graph::Layer& l : graph.layers()) stage.layers.push_back(l.name);
  stage.devices = {cluster.device(0).name};
  p.stages = {stage};
  for (const auto& [schedule, calls] : std::vector<std::pair<std::string, int>>{{"1f1b", 4}, {"zb-h1", 8}}) {
    p.schedule.name = schedule;
    graph.setBackwardCallSeconds(0);
    const double free_calls = evaluatePlan(graph, cluster, p).report.iteration_time;
    graph.setBackwardCallSeconds(5e-6);
    EXPECT_NEAR(evaluatePlan(graph, cluster, p).report.iteration_time - free_calls, calls * 5e-6, 1e-12) << schedule;
  }
}

// A CPU rank's heap keeps a share of its tensors freed beside them, its allocator's
// (the one the profile ran on); a GPU's caching allocator is measured as it is.
TEST(Evaluate, ACpuRanksHeapKeepsAShareOfItsTensors) {
  graph::LayerGraph graph = graph::LayerGraph::uniformChain(2, 1e-3, 1e-3, 1e-3, 1000, 4000);
  plan::Plan p;
  p.microbatch_size = 1;
  p.microbatches = 2;
  p.schedule.name = "1f1b";
  const cluster::ClusterSpec cpus = cluster::ClusterSpec::uniform(1, int64_t{1} << 30, 1e9, 0);
  const cluster::ClusterSpec gpus({{"gpu0", "gpu", 1, int64_t{1} << 30}}, {}, {});
  p.stages = {{{"layer0", "layer1"}, {cpus.device(0).name}}};
  const RankReport glibc = evaluatePlan(graph, cpus, p).report.ranks[0];
  graph::ProcessMemory on_tcmalloc;
  on_tcmalloc.heap = "tcmalloc";
  graph.setProcessMemory(on_tcmalloc);
  const RankReport tcmalloc = evaluatePlan(graph, cpus, p).report.ranks[0];
  p.stages[0].devices = {"gpu0"};
  const RankReport gpu = evaluatePlan(graph, gpus, p).report.ranks[0];
  EXPECT_EQ(gpu.process_bytes, 0);
  const double tensors = static_cast<double>(gpu.peak_memory_bytes);
  EXPECT_GT(tensors, 0);
  EXPECT_NEAR(static_cast<double>(glibc.process_bytes), graph::kGlibcKeptShare * tensors, 1.0);
  EXPECT_NEAR(static_cast<double>(glibc.peak_memory_bytes), (1 + graph::kGlibcKeptShare) * tensors, 1.0);
  EXPECT_NEAR(static_cast<double>(tcmalloc.process_bytes), graph::kTcmallocKeptShare * tensors, 1.0);
}

TEST(Evaluate, ExtrapolatedReportMatchesFullSimulation) {
  const graph::LayerGraph graph = unevenChain();
  const cluster::ClusterSpec cluster = sixDevices();
  for (const std::string& name : schedule::scheduleNames()) {
    SCOPED_TRACE(name);
    const plan::Plan p = planFor(name, cluster, 240);
    ASSERT_TRUE(extrapolationPoints(p).has_value());
    const Report predicted = predictReport(graph, cluster, p), simulated = simulatedReport(graph, cluster, p);
    // GPipe's simulated iteration grows by a per-micro-batch time that wanders by a few
    // tenths of a percent however long the mini-batch (its forward phase queues every
    // message at once); every other schedule's is periodic.
    const double tolerance = name == "gpipe" ? 5e-3 : 1e-9;
    EXPECT_NEAR(predicted.iteration_time / simulated.iteration_time, 1.0, tolerance);
    EXPECT_EQ(predicted.microbatches, simulated.microbatches);
    EXPECT_EQ(predicted.samples_per_minibatch, simulated.samples_per_minibatch);
    ASSERT_EQ(predicted.ranks.size(), simulated.ranks.size());
    for (std::size_t r = 0; r < simulated.ranks.size(); ++r) {
      EXPECT_NEAR(predicted.ranks[r].busy_seconds / simulated.ranks[r].busy_seconds, 1.0, 1e-9) << "rank " << r;
      EXPECT_NEAR(static_cast<double>(predicted.ranks[r].peak_memory_bytes) / simulated.ranks[r].peak_memory_bytes, 1.0,
                  1e-9) << "rank " << r;
      EXPECT_EQ(predicted.ranks[r].weight_versions, simulated.ranks[r].weight_versions) << "rank " << r;
    }
  }
}

// An asynchronous schedule's whole mini-batch past the transient, a whole number of
// quanta long, is simulated with one mini-batch after the first (wholeMinibatchWindow):
// the same report as the window of kSteadyWindow that simulatedReport takes.
TEST(Evaluate, OneMinibatchWindowWherePeriodic) {
  const graph::LayerGraph graph = unevenChain();
  const cluster::ClusterSpec cluster = sixDevices();
  int whole = 0;
  for (const std::string& name : schedule::scheduleNames()) {
    if (!schedule::isAsynchronous(name)) continue;
    for (int m : {24, 30, 48, 66}) {
      SCOPED_TRACE(name + " m=" + std::to_string(m));
      const plan::Plan p = planFor(name, cluster, m);
      if (extrapolationPoints(p)) continue;  // the line, tested above
      ++whole;
      const Report predicted = predictReport(graph, cluster, p), simulated = simulatedReport(graph, cluster, p);
      EXPECT_NEAR(predicted.iteration_time / simulated.iteration_time, 1.0, 1e-9);
      ASSERT_EQ(predicted.ranks.size(), simulated.ranks.size());
      for (std::size_t r = 0; r < simulated.ranks.size(); ++r) {
        EXPECT_NEAR(predicted.ranks[r].busy_seconds / simulated.ranks[r].busy_seconds, 1.0, 1e-9) << "rank " << r;
        EXPECT_EQ(predicted.ranks[r].peak_memory_bytes, simulated.ranks[r].peak_memory_bytes) << "rank " << r;
        EXPECT_EQ(predicted.ranks[r].weight_versions, simulated.ranks[r].weight_versions) << "rank " << r;
      }
    }
  }
  EXPECT_GE(whole, 6);
}

// PipeDream's AlexNet on its 32 GPUs, as the planner chose it at a batch of 4096: 24
// replicas feed 3, whose ports queue a little more with every micro-batch. A line
// through two short mini-batches would miss by 0.7%: the report sees the queue grow
// and simulates the mini-batch whole.
TEST(Evaluate, AQueueThatBindsLateIsSimulatedWhole) {
  const std::string profiles = std::string(PIPETRAIN_SOURCE_DIR) + "/bench/profiles/";
  const graph::LayerGraph graph = graph::LayerGraph::load(profiles + "pipedream-alexnet.json");
  const cluster::ClusterSpec cluster = cluster::ClusterSpec::load(profiles + "pipedream-32gpus.json");
  plan::Plan p;
  p.microbatches = 4096;
  p.schedule.name = "1f1b";
  p.stages.resize(2);
  for (int l = 0; l < graph.size(); ++l) p.stages[l < 16 ? 0 : 1].layers.push_back(graph.layer(l).name);
  for (int d = 0; d < 27; ++d) p.stages[d < 24 ? 0 : 1].devices.push_back(cluster.device(d).name);
  ASSERT_TRUE(extrapolationPoints(p).has_value());
  EXPECT_NEAR(predictReport(graph, cluster, p).iteration_time / simulatedReport(graph, cluster, p).iteration_time, 1.0,
              1e-12);
}

TEST(Evaluate, ShortMiniBatchesAreSimulatedWhole) {
  const cluster::ClusterSpec cluster = sixDevices();
  EXPECT_FALSE(extrapolationPoints(planFor("1f1b", cluster, 8)).has_value());
  // The counts keep the plan's remainder modulo the replica groups (2, 1 and 3 replicas).
  const auto points = extrapolationPoints(planFor("1f1b", cluster, 241));
  ASSERT_TRUE(points.has_value());
  EXPECT_EQ(points->first % 6, 241 % 6);
  EXPECT_EQ((points->second - points->first) % 6, 0);
  EXPECT_LT(points->second, 241);
}

// Every rank's process holds the framework's working memory; the ranks that load the
// micro-batches (the first stage) or the labels (the last) hold the dataset too.
TEST(Evaluate, EachRankHoldsTheFrameworkAndTheRanksThatLoadDataTheDataset) {
  graph::LayerGraph graph = unevenChain();
  const cluster::ClusterSpec cluster = sixDevices();
  const plan::Plan plan = planFor("1f1b", cluster, 4);
  const Report without = predictReport(graph, cluster, plan);
  graph.setProcessMemory({48 << 20, 30 << 20, 1});
  const Report with = predictReport(graph, cluster, plan);
  ASSERT_EQ(with.ranks.size(), 6u);  // stages on 2, 1 and 3 replicas: rank 2 runs the middle one
  for (int r = 0; r < 6; ++r) {
    const int64_t expected = (30 << 20) + (r == 2 ? 0 : 48 << 20);
    EXPECT_EQ(with.ranks[r].process_bytes, expected) << "rank " << r;
    EXPECT_EQ(with.ranks[r].peak_memory_bytes - without.ranks[r].peak_memory_bytes, expected) << "rank " << r;
  }
}

TEST(Evaluate, ARefusedPlanIsRefusedWithItsOwnNumbers) {
  // PipeDream steps per round of one micro-batch per replica: 241 is no multiple of 6.
  const plan::Plan p = planFor("pipedream", sixDevices(), 241);
  try {
    predictReport(unevenChain(), sixDevices(), p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("241"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipetrain::sim
