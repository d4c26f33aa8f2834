// Activation recomputation in the plan, the cost model, the memory accounting and the
// planner (plan::Stage::recompute, planner::Recompute).
#include <gtest/gtest.h>

#include <limits>

#include "../expect_error.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/planner/chain_partition.h"
#include "pipetrain/planner/explore.h"
#include "pipetrain/sim/cost_model.h"
#include "pipetrain/sim/evaluate.h"

namespace pipetrain::planner {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Eight layers, 1 ms per pass each, that save 16 MiB a sample and send 1 MiB on; 1 MiB of
// weights and 2 MiB of optimizer state each.
graph::LayerGraph heavyActivations() {
  std::vector<graph::Layer> layers;
  for (int i = 0; i < 8; ++i) {
    graph::Layer l;
    l.name = "layer" + std::to_string(i);
    if (i > 0) l.inputs = {layers.back().name};
    l.forward_seconds = l.backward_input_seconds = l.backward_weight_seconds = 1e-3;
    l.output_bytes = kMiB;
    l.saved_activation_bytes = 16 * kMiB;
    l.param_bytes = kMiB;
    l.optimizer_state_bytes = 2 * kMiB;
    layers.push_back(l);
  }
  return graph::LayerGraph(layers, 1);
}

cluster::ClusterSpec fourDevices(int64_t memory) {
  std::vector<cluster::Device> d;
  for (int i = 0; i < 4; ++i) d.push_back({"dev" + std::to_string(i), "gpu", 1.0, memory});
  return cluster::ClusterSpec(d, {{"ring", 4, 1e10, 1e-6}}, {});
}

std::vector<std::string> names(const graph::LayerGraph& g) {
  std::vector<std::string> out;
  for (const auto& l : g.layers()) out.push_back(l.name);
  return out;
}

plan::Plan twoStages(const graph::LayerGraph& g, bool recompute_last) {
  plan::ScheduleOptions schedule;
  schedule.name = "1f1b";
  plan::Plan p = plan::chainPlan(names(g), {0, 4, 8}, {}, schedule, /*microbatch_size=*/2, /*microbatches=*/8);
  p.stages[1].recompute = recompute_last;
  p.stages[0].recompute = false;
  return p;
}

TEST(Recompute, CostModelRunsTheForwardPassAgainAndKeepsTheMessages) {
  const graph::LayerGraph g = heavyActivations();
  const cluster::ClusterSpec c = fourDevices(int64_t{1} << 40);
  const plan::Plan p = twoStages(g, true);
  const sim::CostModel costs(g, c, p);
  const sim::StageCosts& kept = costs.stage(0);
  const sim::StageCosts& recomputed = costs.stage(1);
  EXPECT_EQ(kept.recompute, 0);
  EXPECT_DOUBLE_EQ(kept.activation_bytes, 4 * 16 * kMiB * 2);
  EXPECT_DOUBLE_EQ(recomputed.recompute, recomputed.forward);
  EXPECT_DOUBLE_EQ(recomputed.activation_bytes, kMiB * 2);  // what stage 0 sent it, per micro-batch of 2
  EXPECT_DOUBLE_EQ(recomputed.recompute_peak_bytes, 4 * 16 * kMiB * 2);
  schedule::Action b;
  b.type = schedule::ActionType::B;
  b.stage = 1;
  EXPECT_DOUBLE_EQ(costs.computeSeconds(b, 1), recomputed.forward + recomputed.backward_input + recomputed.backward_weight);
}

TEST(Recompute, SelectiveRecomputationRunsItsLayersAgainAndKeepsTheirLastOutput) {
  const graph::LayerGraph g = heavyActivations();
  const cluster::ClusterSpec c = fourDevices(int64_t{1} << 40);
  plan::Plan p = twoStages(g, true);
  p.stages[1].recompute_layers = 3;  // layer4..layer6 run again; layer6's output feeds layer7
  const sim::CostModel costs(g, c, p);
  const sim::StageCosts& part = costs.stage(1);
  EXPECT_DOUBLE_EQ(part.recompute, 3 * 1e-3 * 2);  // three layers' F at micro-batch 2
  EXPECT_DOUBLE_EQ(part.recompute_peak_bytes, 3 * 16 * kMiB * 2);
  // The input from stage 0, layer6's output, and layer7's own activations.
  EXPECT_DOUBLE_EQ(part.activation_bytes, kMiB * 2 + kMiB * 2 + 16 * kMiB * 2);
  EXPECT_EQ(plan::recomputedStages(p), "1(3/4)");
}

// The profiler times each layer's forward pass without a graph as well: a recomputing
// layer's F costs that, and its B (or I) the forward pass with a graph again.
TEST(Recompute, FRunsWithoutAGraphAndBRunsTheForwardPassWithOne) {
  std::vector<graph::Layer> layers = heavyActivations().layers();
  for (graph::Layer& l : layers) l.forward_no_grad_seconds = 0.6e-3;
  const graph::LayerGraph g(layers, 1);
  const cluster::ClusterSpec c = fourDevices(int64_t{1} << 40);
  plan::Plan p = twoStages(g, true);
  {
    const sim::CostModel costs(g, c, p);
    EXPECT_DOUBLE_EQ(costs.stage(0).forward, 4 * 1e-3 * 2);  // not recomputing: with a graph
    EXPECT_DOUBLE_EQ(costs.stage(1).forward, 4 * 0.6e-3 * 2);
    EXPECT_DOUBLE_EQ(costs.stage(1).recompute, 4 * 1e-3 * 2);
  }
  p.stages[1].recompute_layers = 3;
  {
    const sim::CostModel costs(g, c, p);
    EXPECT_DOUBLE_EQ(costs.stage(1).forward, (3 * 0.6e-3 + 1e-3) * 2);
    EXPECT_DOUBLE_EQ(costs.stage(1).recompute, 3 * 1e-3 * 2);
  }
  // The chain DP: a stage that fits only recomputing adds its layers' F without a graph.
  PartitionOptions o;
  o.microbatch_size = 1;
  o.microbatches = 8;
  o.assumed_depth = 2;
  o.recompute = Recompute::kAuto;
  const ChainProblem tight(g, fourDevices(100 * kMiB), o), roomy(g, fourDevices(int64_t{1} << 40), o);
  EXPECT_NEAR(tight.stageSeconds(0, 4, tight.deviceBlock(0, 1)),
              roomy.stageSeconds(0, 4, roomy.deviceBlock(0, 1)) + 8 * 4 * 0.6e-3, 1e-12);
}

TEST(Recompute, PlansSaySomeLayersRecomputeAndRefuseAbsurdCounts) {
  const graph::LayerGraph g = heavyActivations();
  plan::Plan p = twoStages(g, true);
  p.stages[1].recompute_layers = 2;
  const json_io::Json j = p.toJson();
  EXPECT_EQ(j["stages"][1]["recompute_layers"], 2);
  EXPECT_EQ(plan::Plan::fromJson(j, "test").stages[1].recomputedLayers(), 2);
  json_io::Json all = j;
  all["stages"][1]["recompute_layers"] = 4;  // every layer: plain recomputation
  EXPECT_EQ(plan::Plan::fromJson(all, "test").stages[1].recompute_layers, 0);
  json_io::Json too_many = j;
  too_many["stages"][1]["recompute_layers"] = 5;
  testing::expectError([&] { plan::Plan::fromJson(too_many, "plan.json"); }, {"plan.json", "recompute_layers", "5"});
  json_io::Json without = j;
  without["stages"][1].erase("recompute");
  testing::expectError([&] { plan::Plan::fromJson(without, "plan.json"); }, {"recompute_layers", "\"recompute\": true"});
  p.stages[0].recompute_layers = 1;  // without recompute: a plan made in code
  testing::expectError([&] { plan::validate(p, g, fourDevices(int64_t{1} << 40)); }, {"stage 0", "recompute_layers"});
}

TEST(Recompute, PredictedMemoryHoldsTheInputsInFlightAndOneWholeMicrobatch) {
  const graph::LayerGraph g = heavyActivations();
  const cluster::ClusterSpec c = fourDevices(int64_t{1} << 40);
  plan::Plan p = twoStages(g, false);
  p.stages[0].recompute = true;  // the stage that holds two micro-batches under 1F1B
  const sim::Report with = sim::predictReport(g, c, p);
  const sim::Report without = sim::predictReport(g, c, twoStages(g, false));
  const double in_flight = without.ranks[0].peak_activations;
  ASSERT_GE(in_flight, 2);
  const double whole = 4 * 16 * kMiB * 2, sent = kMiB * 2;  // per micro-batch of 2 (the first stage receives nothing)
  EXPECT_NEAR(static_cast<double>(without.ranks[0].peak_memory_bytes - with.ranks[0].peak_memory_bytes),
              in_flight * whole - (in_flight * sent + whole), 1.0);
  EXPECT_EQ(with.ranks[1].peak_memory_bytes, without.ranks[1].peak_memory_bytes);
  EXPECT_LT(with.throughput, without.throughput);  // the forward pass runs twice
}

TEST(Recompute, PlansSayWhichStagesRecompute) {
  const graph::LayerGraph g = heavyActivations();
  plan::Plan p = twoStages(g, true);
  const plan::Plan read = plan::Plan::fromJson(p.toJson(), "test");
  EXPECT_FALSE(read.stages[0].recompute);
  EXPECT_TRUE(read.stages[1].recompute);
  EXPECT_FALSE(p.toJson()["stages"][0].contains("recompute"));  // absent = false: older plans read the same
  EXPECT_EQ(plan::recomputedStages(p), "1");
  p.stages[0].recompute = true;
  EXPECT_EQ(plan::recomputedStages(p), "all");
  plan::ScheduleOptions schedule;
  schedule.name = "1f1b";
  plan::Plan five = plan::chainPlan(names(g), {0, 1, 2, 3, 4, 8}, {}, schedule, 1, 8);
  for (int s : {0, 1, 2, 4}) five.stages[s].recompute = true;
  EXPECT_EQ(plan::recomputedStages(five), "0-2,4");
}

TEST(Recompute, RefusedUnderPipeMare) {
  const graph::LayerGraph g = heavyActivations();
  plan::Plan p = twoStages(g, true);
  p.schedule.name = "pipemare";
  testing::expectError([&] { plan::validate(p, g, fourDevices(int64_t{1} << 40)); }, {"stage 1", "latest weights"});
}

ExploreOptions options(Recompute recompute) {
  ExploreOptions o;
  o.global_batch = 16;
  o.recompute = recompute;
  return o;
}

TEST(Recompute, AutoFindsAPlanWhereNoneFitsAndBeatsFull) {
  const graph::LayerGraph g = heavyActivations();
  // A layer's weights, gradient and optimizer state take 4 MiB and a sample's activations
  // 16 MiB a layer: 100 MiB holds no micro-batch of a deep stage several times over.
  const cluster::ClusterSpec c = fourDevices(100 * kMiB);
  EXPECT_THROW(explore(g, c, options(Recompute::kNone)), Error);
  const Exploration full = explore(g, c, options(Recompute::kFull));
  const Exploration automatic = explore(g, c, options(Recompute::kAuto));
  EXPECT_EQ(plan::recomputedStages(full.best().plan), "all");
  const std::string chosen = plan::recomputedStages(automatic.best().plan);
  EXPECT_FALSE(chosen.empty());
  EXPECT_GE(automatic.best().report.throughput, full.best().report.throughput * 0.999);
  for (const auto& rank : automatic.best().report.ranks) EXPECT_LE(rank.peak_memory_bytes, rank.memory_capacity_bytes);
}

// 120 MiB: the 2-stage 1F1B plan fits with half its first stage's layers recomputing;
// recomputing all four would cost two more layers' F for nothing.
TEST(Recompute, AutoRecomputesOnlyTheLayersMemoryNeeds) {
  const graph::LayerGraph g = heavyActivations();
  const cluster::ClusterSpec c = fourDevices(120 * kMiB);
  const Exploration automatic = explore(g, c, options(Recompute::kAuto));
  const Candidate& best = automatic.best();
  int partly = 0;
  for (const plan::Stage& s : best.plan.stages)
    partly += s.recomputedLayers() > 0 && s.recomputedLayers() < static_cast<int>(s.layers.size());
  EXPECT_GE(partly, 1) << plan::recomputedStages(best.plan);
  for (const auto& rank : best.report.ranks) EXPECT_LE(rank.peak_memory_bytes, rank.memory_capacity_bytes);
  plan::Plan whole = best.plan;
  for (plan::Stage& s : whole.stages) s.recompute_layers = 0;
  EXPECT_GT(best.report.throughput, sim::predictReport(g, c, whole).throughput);
  EXPECT_GT(best.report.throughput, explore(g, c, options(Recompute::kFull)).best().report.throughput);
}

TEST(Recompute, AutoChangesNothingWhereEverythingFits) {
  const graph::LayerGraph g = heavyActivations();
  const cluster::ClusterSpec c = fourDevices(int64_t{1} << 40);
  const Exploration none = explore(g, c, options(Recompute::kNone));
  const Exploration automatic = explore(g, c, options(Recompute::kAuto));
  EXPECT_EQ(plan::recomputedStages(automatic.best().plan), "");
  EXPECT_EQ(automatic.best().plan.toJson(), none.best().plan.toJson());
  EXPECT_EQ(automatic.best().report.throughput, none.best().report.throughput);
}

// `auto` searches what `none` and `full` search: where a plan fits only by recomputing at
// the profiled micro-batch, the smaller micro-batches that fit without it compete too
// (the zoo's gpt as profiled, examples/graphs/gpt.json, on 4 devices: at 900 MB none
// found micro-batch 1 at 4.13 samples/s while auto kept micro-batch 4 recomputing, 2.73).
TEST(Recompute, AutoPredictsNoLessThanNoneOrFull) {
  const auto g = graph::LayerGraph::load(std::string(PIPETRAIN_SOURCE_DIR) + "/examples/graphs/gpt.json");
  for (const int64_t memory : {700'000'000LL, 900'000'000LL, 1'200'000'000LL}) {
    SCOPED_TRACE(memory);
    const cluster::ClusterSpec c = fourDevices(memory);
    ExploreOptions o;
    o.global_batch = 64;
    double best_other = 0;
    for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
      o.recompute = r;
      try {
        best_other = std::max(best_other, explore(g, c, o).best().report.throughput);
      } catch (const Error&) {  // nothing fits without recomputing
      }
    }
    o.recompute = Recompute::kAuto;
    EXPECT_GE(explore(g, c, o).best().report.throughput, 0.99 * best_other);
  }
}

TEST(Recompute, TheChainDpPricesWhatARecomputingStageKeeps) {
  const graph::LayerGraph g = heavyActivations();
  PartitionOptions o;
  o.microbatch_size = 1;
  o.microbatches = 8;
  o.assumed_depth = 2;
  o.recompute = Recompute::kAuto;
  const ChainProblem problem(g, fourDevices(100 * kMiB), o);
  const double with = problem.stageMemoryBytes(0, 4, 1, true), without = problem.stageMemoryBytes(0, 4, 1, false);
  // Two micro-batches in flight: each keeps 1 MiB (what the stage sends) instead of 64 MiB,
  // and the one being recomputed all 64 MiB.
  EXPECT_DOUBLE_EQ(without - with, 2 * 64.0 * kMiB - (2 * 1.0 * kMiB + 64.0 * kMiB));
  // 4 layers x 4 MiB of weights, gradient and state + 66 MiB fits 100 MiB; 16 + 128 MiB
  // does not: the stage recomputes, one more forward pass (4 ms) for each of 8 micro-batches.
  const ChainProblem roomy(g, fourDevices(int64_t{1} << 40), o);
  EXPECT_NEAR(problem.stageSeconds(0, 4, problem.deviceBlock(0, 1)),
              roomy.stageSeconds(0, 4, roomy.deviceBlock(0, 1)) + 8 * 4e-3, 1e-12);
  o.recompute = Recompute::kNone;
  const ChainProblem refusing(g, fourDevices(100 * kMiB), o);
  EXPECT_EQ(refusing.stageSeconds(0, 4, refusing.deviceBlock(0, 1)), std::numeric_limits<double>::infinity());
  o.microbatch_size = 4;  // a layer alone: 4 MiB + 2 x 64 MiB in flight
  testing::expectError([&] { solveChain(ChainProblem(g, fourDevices(100 * kMiB), o)); },
                       {"single block of layers needs up to 132.0 MiB", "activation recomputation"});
}

}  // namespace
}  // namespace pipetrain::planner
