// sharpenProfile: a run's stage times move the profile's layers, the first run all the
// way, later runs toward the geometric mean of all of them.
#include "pipetrain/plan/measured_profile.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pipetrain/graph/heap_share.h"
#include "pipetrain/plan/plan_program.h"
#include "pipetrain/util/error.h"

namespace pipetrain::plan {
namespace {

using schedule::ActionType;

std::vector<std::string> namesOf(const graph::LayerGraph& g) {
  std::vector<std::string> names;
  for (const auto& l : g.layers()) names.push_back(l.name);
  return names;
}

// Stage `s`'s figures at the plan's micro-batch size, summed over its layers.
graph::PassSeconds stageSeconds(const graph::LayerGraph& g, const Plan& plan, int s) {
  graph::PassSeconds sum;
  for (const std::string& name : plan.stages[s].layers) {
    const graph::PassSeconds t = g.secondsAt(g.indexOf(name), plan.microbatch_size);
    sum.forward += t.forward;
    sum.backward_input += t.backward_input;
    sum.backward_weight += t.backward_weight;
    sum.split_weight += t.split_weight;
  }
  return sum;
}

Plan twoStages(const graph::LayerGraph& g, const std::string& schedule, int64_t microbatch_size) {
  ScheduleOptions o;
  o.name = schedule;
  return chainPlan(namesOf(g), {0, 1, 4}, {}, o, microbatch_size, 4);
}

TEST(SharpenProfile, TheFirstRunSetsEachStageToWhatItMeasured) {
  const graph::LayerGraph g = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100);
  const Plan plan = twoStages(g, "1f1b", g.batchSize());
  const StageSeconds measured{{{0, ActionType::F}, 1.5e-3}, {{0, ActionType::B}, 6e-3},
                              {{1, ActionType::F}, 2.4e-3}, {{1, ActionType::B}, 9e-3}};
  const SharpenedProfile s = sharpenProfile(g, plan, measured, 0);
  EXPECT_NEAR(stageSeconds(s.graph, plan, 0).forward, 1.5e-3, 1e-12);
  EXPECT_NEAR(stageSeconds(s.graph, plan, 0).backward_input + stageSeconds(s.graph, plan, 0).backward_weight, 6e-3, 1e-12);
  EXPECT_NEAR(stageSeconds(s.graph, plan, 1).forward, 2.4e-3, 1e-12);
  // The stage's layers move together: each of stage 1's three by 2.4 / 3.
  for (int i = 1; i < 4; ++i) EXPECT_NEAR(s.graph.layer(i).forward_seconds, 0.8e-3, 1e-12);
  // I and W keep their proportion under a whole backward pass.
  EXPECT_NEAR(s.graph.layer(0).backward_input_seconds / s.graph.layer(0).backward_weight_seconds, 2.0, 1e-9);
  EXPECT_NE(s.note.find("stage 1: F x0.80"), std::string::npos) << s.note;
}

// The times learned are at the run's cores' speed, and the profile's probe moves with
// them, so that the next run's speed is compared with the speed its plan was priced at.
TEST(SharpenProfile, TheProbeMovesWithTheTimesTowardTheRunsSlowestCore) {
  graph::LayerGraph g = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100);
  g.setProfiledAs({1, 2, 1e-3});
  const Plan plan = twoStages(g, "1f1b", g.batchSize());
  const StageSeconds measured{{{0, ActionType::F}, 4e-3}};
  EXPECT_NEAR(sharpenProfile(g, plan, measured, 0, 2e-3).graph.profiledAs().probe_seconds, 2e-3, 1e-15);
  // Merged with three runs before: a quarter of the way, geometrically, as the times.
  EXPECT_NEAR(sharpenProfile(g, plan, measured, 3, 16e-3).graph.profiledAs().probe_seconds, 2e-3, 1e-15);
  // Not measured (a GPU's run), or no times learned: kept.
  EXPECT_NEAR(sharpenProfile(g, plan, measured, 0).graph.profiledAs().probe_seconds, 1e-3, 1e-15);
  EXPECT_NEAR(sharpenProfile(g, plan, {}, 0, 2e-3).graph.profiledAs().probe_seconds, 1e-3, 1e-15);
  EXPECT_EQ(sharpenProfile(g, plan, measured, 0).graph.profiledAs().shares, 2);
}

// An asynchronous rule's step stashes or corrects weights besides the optimizer's
// update: it says nothing of the plain step the profile times, which it keeps.
TEST(SharpenProfile, AnAsynchronousRulesStepLeavesThePlainStepAsProfiled) {
  std::vector<graph::Layer> layers = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100).layers();
  for (graph::Layer& l : layers) l.optimizer_seconds = 1e-3;
  const graph::LayerGraph g(layers, 1);
  const StageSeconds measured{{{0, ActionType::F}, 2e-3}, {{0, ActionType::STEP}, 3e-3}};
  const SharpenedProfile async = sharpenProfile(g, twoStages(g, "pipemare", g.batchSize()), measured, 0);
  EXPECT_NEAR(async.graph.layer(0).optimizer_seconds, 1e-3, 1e-15);
  EXPECT_NEAR(async.graph.layer(0).forward_seconds, 2e-3, 1e-15);
  EXPECT_NE(async.note.find("step kept"), std::string::npos) << async.note;
  const SharpenedProfile sync = sharpenProfile(g, twoStages(g, "1f1b", g.batchSize()), measured, 0);
  EXPECT_NEAR(sync.graph.layer(0).optimizer_seconds, 3e-3, 1e-15);
}

// A recomputing stage's F ran its layers without a graph, and its B ran them again with
// one before the backward pass: each is compared with what the cost model priced it at.
TEST(SharpenProfile, ARecomputingStageIsComparedWithWhatRecomputationCosts) {
  std::vector<graph::Layer> layers = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100).layers();
  for (graph::Layer& l : layers) l.forward_no_grad_seconds = 0.5e-3;
  const graph::LayerGraph g(layers, 1);
  Plan plan = twoStages(g, "1f1b", g.batchSize());
  plan.stages[1].recompute = true;
  // Measured as priced: F 3 x 0.5 ms, B 3 x (1 + 2 + 1) ms. Nothing moves.
  const SharpenedProfile same = sharpenProfile(g, plan, {{{1, ActionType::F}, 1.5e-3}, {{1, ActionType::B}, 12e-3}}, 0);
  for (int i = 1; i < 4; ++i) {
    EXPECT_NEAR(same.graph.layer(i).forward_seconds, 1e-3, 1e-12);
    EXPECT_NEAR(same.graph.layer(i).forward_no_grad_seconds, 0.5e-3, 1e-12);
    EXPECT_NEAR(same.graph.layer(i).backward_input_seconds, 2e-3, 1e-12);
  }
  // F twice as slow as priced: both forward figures double.
  const SharpenedProfile slower = sharpenProfile(g, plan, {{{1, ActionType::F}, 3e-3}}, 0);
  EXPECT_NEAR(slower.graph.layer(2).forward_no_grad_seconds, 1e-3, 1e-12);
  EXPECT_NEAR(slower.graph.layer(2).forward_seconds, 2e-3, 1e-12);
}

// Under 2BW every F and B past the first mini-batch reads the stashed version, swapped in
// and back around it: the run's times hold those swaps, which the cost model prices
// apart, so they come off before the comparison.
TEST(SharpenProfile, TheWeightVersionsCopiesComeOffTheMeasuredTimes) {
  std::vector<graph::Layer> layers = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100).layers();
  for (graph::Layer& l : layers) l.weight_versions = {0.25e-3, 0.5e-3, 0};
  const graph::LayerGraph g(layers, 1);
  const Plan plan = twoStages(g, "2bw", g.batchSize());
  // Stage 1: F 3 x 1 ms and B 3 x 3 ms of compute, each with two swaps of 3 x 0.25 ms.
  const SharpenedProfile same =
      sharpenProfile(g, plan, {{{1, ActionType::F}, 4.5e-3}, {{1, ActionType::B}, 10.5e-3}}, 0);
  for (int i = 1; i < 4; ++i) {
    EXPECT_NEAR(same.graph.layer(i).forward_seconds, 1e-3, 1e-12);
    EXPECT_NEAR(same.graph.layer(i).backward_input_seconds, 2e-3, 1e-12);
    EXPECT_NEAR(same.graph.layer(i).weight_versions.swap, 0.25e-3, 1e-15);
  }
  // Under 1F1B nothing is swapped: the same times say the compute was slower.
  const SharpenedProfile sync =
      sharpenProfile(g, twoStages(g, "1f1b", g.batchSize()), {{{1, ActionType::F}, 4.5e-3}}, 0);
  EXPECT_NEAR(sync.graph.layer(1).forward_seconds, 1.5e-3, 1e-12);
}

// A stage's B, I and W each make one call into autograd's engine, which the layers'
// figures are net of: it comes off the measured times too, and the graph keeps it.
TEST(SharpenProfile, TheBackwardCallComesOffTheMeasuredTimes) {
  graph::LayerGraph g = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100);
  g.setBackwardCallSeconds(0.5e-3);
  // Stage 1: B of 3 x 3 ms and one call; F makes none.
  const SharpenedProfile same = sharpenProfile(g, twoStages(g, "1f1b", g.batchSize()),
                                               {{{1, ActionType::F}, 3e-3}, {{1, ActionType::B}, 9.5e-3}}, 0);
  for (int i = 1; i < 4; ++i) {
    EXPECT_NEAR(same.graph.layer(i).forward_seconds, 1e-3, 1e-12);
    EXPECT_NEAR(same.graph.layer(i).backward_input_seconds, 2e-3, 1e-12);
  }
  EXPECT_EQ(same.graph.backwardCallSeconds(), 0.5e-3);
  // Split: I and W one call each.
  const SharpenedProfile split = sharpenProfile(g, twoStages(g, "zb-h1", g.batchSize()),
                                                {{{1, ActionType::I}, 6.5e-3}, {{1, ActionType::W}, 3.5e-3}}, 0);
  EXPECT_NEAR(split.graph.layer(1).backward_input_seconds, 2e-3, 1e-12);
  EXPECT_NEAR(split.graph.layer(1).splitWeightSeconds(), 1e-3, 1e-12);
}

TEST(SharpenProfile, LaterRunsMoveTowardTheGeometricMean) {
  const graph::LayerGraph g = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100);
  const Plan plan = twoStages(g, "1f1b", g.batchSize());
  const SharpenedProfile first = sharpenProfile(g, plan, {{{0, ActionType::F}, 2e-3}}, 0);
  const SharpenedProfile second = sharpenProfile(first.graph, plan, {{{0, ActionType::F}, 8e-3}}, 1);
  EXPECT_NEAR(stageSeconds(second.graph, plan, 0).forward, 4e-3, 1e-12);  // sqrt(2 x 8)
  // What was not measured stays.
  EXPECT_DOUBLE_EQ(second.graph.layer(2).forward_seconds, 1e-3);
  EXPECT_DOUBLE_EQ(second.graph.layer(0).backward_input_seconds, 2e-3);
}

TEST(SharpenProfile, SplitBackwardsMoveIAndWApartAtEveryTimedSize) {
  const graph::LayerGraph at8 = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100);
  const graph::LayerGraph at32(graph::LayerGraph::uniformChain(4, 3e-3, 6e-3, 3e-3, 400, 100).layers(), 3);
  graph::LayerGraph g = at8.withOtherBatches({at32}, "test");
  ASSERT_EQ(g.batchSize(), 1);  // uniformChain's; the other size is 3
  const Plan plan = twoStages(g, "zb-h1", 1);
  const StageSeconds measured{{{0, ActionType::I}, 4e-3}, {{0, ActionType::W}, 0.5e-3}};
  const SharpenedProfile s = sharpenProfile(g, plan, measured, 0);
  EXPECT_NEAR(s.graph.layer(0).backward_input_seconds, 4e-3, 1e-12);
  EXPECT_NEAR(s.graph.layer(0).splitWeightSeconds(), 0.5e-3, 1e-12);
  ASSERT_EQ(s.graph.layer(0).other_batches.size(), 1u);
  EXPECT_NEAR(s.graph.layer(0).other_batches[0].seconds.backward_input, 12e-3, 1e-12);
}

TEST(SharpenProfile, TheProcessMemoryStaysWithTheProfile) {
  graph::LayerGraph g = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100);
  g.setProcessMemory({5, 7, 1});
  const SharpenedProfile s = sharpenProfile(g, twoStages(g, "1f1b", g.batchSize()), {}, 0);
  EXPECT_EQ(s.graph.processMemory().framework_bytes, 7);
  EXPECT_EQ(s.graph.processMemory().data_bytes, 5);
}

TEST(FrameworkBytesOfRun, TheMedianOverTheRanksOfWhatTheyHeldBeyondTensorsTheirHeapShareAndData) {
  EXPECT_EQ(frameworkBytesOfRun({}, "glibc"), -1);
  // Beside each rank's tensors glibc's heap keeps graph::kGlibcKeptShare (0.4) of them:
  // 100 - 40 - 16 - 30 = 14; 90 - 40 - 16 (no data) = 34; 70 - 20 - 8 - 0 = 42: median 34.
  ASSERT_DOUBLE_EQ(graph::kGlibcKeptShare, 0.4);
  EXPECT_EQ(frameworkBytesOfRun({{100, 40, 30}, {90, 40, -1}, {70, 20, 0}}, "glibc, freed memory retained"), 34);
  EXPECT_EQ(frameworkBytesOfRun({{100, 40, 30}, {90, 40, -1}, {70, 20, 0}}, ""), 34);  // not recorded: glibc
  // tcmalloc keeps kTcmallocKeptShare (0.11): 90 - 40 - 4.4 = 45.6; 70 - 20 - 2.2 = 47.8; 100 - 40 - 4.4 - 30.
  ASSERT_DOUBLE_EQ(graph::kTcmallocKeptShare, 0.11);
  EXPECT_EQ(frameworkBytesOfRun({{100, 40, 30}, {90, 40, -1}, {70, 20, 0}}, "tcmalloc"), 46);
  EXPECT_EQ(frameworkBytesOfRun({{10, 40, -1}}, "tcmalloc"), 0);  // held less than priced: nothing learned beyond
}

TEST(LearnProcessMemory, TheFrameworkIsTheMeanOfTheRunsAndTheDataTheLatestMeasure) {
  const graph::ProcessMemory first = learnProcessMemory({48, 0, 0}, 30, -1);
  EXPECT_EQ(first.framework_bytes, 30);
  EXPECT_EQ(first.runs, 1);
  EXPECT_EQ(first.data_bytes, 48);  // the run loaded no data: the profile's figure stays
  const graph::ProcessMemory second = learnProcessMemory(first, 40, 56);
  EXPECT_EQ(second.framework_bytes, 35);
  EXPECT_EQ(second.runs, 2);
  EXPECT_EQ(second.data_bytes, 56);
  EXPECT_THROW(learnProcessMemory(first, -1, 0), Error);
}

TEST(LearnActionOverhead, TheRuntimesTimePerActionIsTheMeanOfTheRuns) {
  const graph::LearnedActionOverhead first = learnActionOverhead({}, 6e-6);
  EXPECT_DOUBLE_EQ(first.seconds, 6e-6);
  EXPECT_EQ(first.runs, 1);
  const graph::LearnedActionOverhead second = learnActionOverhead(first, 10e-6);
  EXPECT_DOUBLE_EQ(second.seconds, 8e-6);
  EXPECT_EQ(second.runs, 2);
  EXPECT_THROW(learnActionOverhead(first, -1e-6), Error);
  // A sharpened profile keeps what it learned.
  graph::LayerGraph g = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100);
  g.setActionOverhead(second);
  const Plan plan = twoStages(g, "1f1b", g.batchSize());
  EXPECT_EQ(sharpenProfile(g, plan, {{{0, ActionType::F}, 2e-3}}, 0).graph.actionOverhead().runs, 2);
}

TEST(SharpenProfile, APlanOfAnotherModelIsRefused) {
  const graph::LayerGraph g = graph::LayerGraph::uniformChain(4, 1e-3, 2e-3, 1e-3, 100, 100);
  const graph::LayerGraph other = graph::LayerGraph::uniformChain(5, 1e-3, 2e-3, 1e-3, 100, 100);
  ScheduleOptions o;
  o.name = "1f1b";
  const Plan plan = chainPlan(namesOf(other), {0, 1, 5}, {}, o, 1, 4);
  try {
    sharpenProfile(g, plan, {}, 0);
    FAIL() << "a layer the profile lacks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipetrain::plan
