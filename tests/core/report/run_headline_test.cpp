#include "pipetrain/report/run_headline.h"

#include <gtest/gtest.h>

#include "pipetrain/planner/explore.h"
#include "pipetrain/report/exploration_table.h"

namespace pipetrain::report {
namespace {

bool anyNoteHas(const std::vector<std::string>& notes, const std::string& text) {
  for (const auto& n : notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

// Two data-parallel replicas whose step is a third all-reduce: the headline must name it,
// not the framework time beside it (the byo example's report once named the framework).
TEST(RunHeadline, NamesTheAllReduceWhereItTakesMostOfTheStep) {
  std::vector<RankShares> ranks(2);
  for (int r = 0; r < 2; ++r) {
    ranks[r].rank = r;
    ranks[r].compute = 0.45;
    ranks[r].allreduce = 0.33;
    ranks[r].messages = 0;
    ranks[r].framework = 0.22;
    ranks[r].core_wait = 0.10;
    ranks[r].schedule_idle = 0.0;
    ranks[r].predicted_allreduce = 0.05;
  }
  EXPECT_EQ(largestLoss(ranks).loss, Loss::kAllReduce);
  EXPECT_NEAR(largestLoss(ranks).share, 0.33, 1e-12);
  const auto notes = runHeadline(ranks, 1000, 2000, 3000);
  EXPECT_TRUE(anyNoteHas(notes, "The largest loss is the all-reduce of the replicas' gradients (33%)"));
  EXPECT_TRUE(anyNoteHas(notes, "the gradients' all-reduce 33% (predicted from this run: 5%)"));
  EXPECT_FALSE(anyNoteHas(notes, "largest loss is the framework"));
}

TEST(RunHeadline, WaitingBeyondTheScheduleIdleIsALossTheScheduleItselfIsNot) {
  std::vector<RankShares> ranks(1);
  ranks[0].compute = 0.6;
  ranks[0].messages = 0.3;
  ranks[0].framework = 0.1;
  ranks[0].schedule_idle = 0.28;  // the bubble the schedule predicts: messages add 2% to it
  EXPECT_EQ(largestLoss(ranks).loss, Loss::kFramework);
  ranks[0].schedule_idle = 0.1;
  EXPECT_EQ(largestLoss(ranks).loss, Loss::kMessages);
  EXPECT_NEAR(largestLoss(ranks).share, 0.2, 1e-12);
}

// A busy machine (other tests, other processes) makes the ranks wait for cores: that is
// said beside the largest loss, which stays named.
TEST(RunHeadline, TheCoreWaitIsSaidBesideTheLargestLossNotInsteadOfIt) {
  std::vector<RankShares> ranks(3);
  for (auto& r : ranks) r.compute = 0.7, r.framework = 0.3, r.core_wait = 0.35;
  EXPECT_EQ(largestLoss(ranks).loss, Loss::kFramework);
  const auto notes = runHeadline(ranks, 1, 0, 0);
  EXPECT_TRUE(anyNoteHas(notes, "The largest loss is the framework"));
  EXPECT_TRUE(anyNoteHas(notes, "waiting for a CPU core took 35%"));
  EXPECT_FALSE(anyNoteHas(notes, "--threads"));  // train has no such choice to offer
  ranks[1].core_wait = -1;  // one rank's kernel did not say: unknown for the run
  EXPECT_FALSE(anyNoteHas(runHeadline(ranks, 1, 0, 0), "CPU core took"));
}

TEST(RunHeadline, SmallLossesAreNotNamed) {
  std::vector<RankShares> ranks(2);
  for (auto& r : ranks) r.compute = 0.96, r.framework = 0.02, r.allreduce = 0.02;
  EXPECT_EQ(largestLoss(ranks).loss, Loss::kNone);
  EXPECT_FALSE(anyNoteHas(runHeadline(ranks, 1, 0, 0), "largest loss"));
}

TEST(CoreSpeedNotes, TheSlowestRanksCoreAgainstTheProfilesPricesThePlanAtItsSpeed) {
  // Rank 1's core took 1.5x the profile's time for the probe: the plan at its speed.
  const auto notes = coreSpeedNotes(0.001, {0.00105, 0.0015}, 300.0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("1.50x slower"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("rank 1"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("1.50 ms"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("200.0 samples/s (planned: 300.0)"), std::string::npos) << notes[0];
  const auto faster = coreSpeedNotes(0.002, {0.001, 0.001}, 300.0);
  ASSERT_EQ(faster.size(), 1u);
  EXPECT_NE(faster[0].find("2.00x faster"), std::string::npos) << faster[0];
  EXPECT_NE(faster[0].find("600.0 samples/s"), std::string::npos) << faster[0];
  // Within 10%, or not measured on either side: nothing to say.
  EXPECT_TRUE(coreSpeedNotes(0.001, {0.00105, 0.00108}, 300.0).empty());
  EXPECT_TRUE(coreSpeedNotes(0, {0.002}, 300.0).empty());
  EXPECT_TRUE(coreSpeedNotes(0.001, {0, 0}, 300.0).empty());
  EXPECT_TRUE(coreSpeedNotes(0.001, {}, 300.0).empty());
  // No prediction to price: the speed alone.
  const auto unplanned = coreSpeedNotes(0.001, {0.002}, NAN);
  ASSERT_EQ(unplanned.size(), 1u);
  EXPECT_EQ(unplanned[0].find("samples/s"), std::string::npos) << unplanned[0];
}

TEST(MemoryNotes, ARankPastTenPercentIsExplainedTheOthersAreNot) {
  std::vector<RankMemory> ranks(3);
  ranks[0] = {0, 105.0, 64.0, 50.0, 48.0, 0, 30.0};  // the framework not learned yet
  ranks[1] = {1, 99.0, 96.0, 80.0, 48.0, 2, 30.0};   // within 10%
  ranks[2] = {2, 80.0, 100.0, 80.0, -1, 2, 30.0};    // below, learned from two runs
  const auto notes = memoryNotes(ranks);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("Rank 0's peak memory"), std::string::npos);
  EXPECT_NE(notes[0].find("64% above"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("opening its datasets added"), std::string::npos);
  EXPECT_NE(notes[0].find("this run taught it"), std::string::npos);
  // Above the prediction, what the heap freed and kept is named; below, it explains nothing.
  EXPECT_NE(notes[0].find("the heap kept 30 B freed for reuse"), std::string::npos) << notes[0];
  EXPECT_EQ(notes[1].find("the heap kept"), std::string::npos) << notes[1];
  EXPECT_NE(notes[1].find("20% below"), std::string::npos) << notes[1];
  EXPECT_NE(notes[1].find("mean of 2 earlier run(s)"), std::string::npos);
  // The console's brief notes: by how much, the same start, none of the why.
  const auto brief = memoryNotes(ranks, /*brief=*/true);
  ASSERT_EQ(brief.size(), 2u);
  for (std::size_t k = 0; k < brief.size(); ++k) {
    EXPECT_EQ(notes[k].rfind(brief[k], 0), 0u) << brief[k];
    EXPECT_EQ(brief[k].find("earlier run"), std::string::npos) << brief[k];
    EXPECT_EQ(brief[k].find("opening its datasets"), std::string::npos) << brief[k];
  }
  ranks.assign(1, {0, 105.0, NAN, 0, -1, 0});  // no prediction: nothing to compare
  EXPECT_TRUE(memoryNotes(ranks).empty());
}

// A batch of one sample on two ranks that must both train: the only plan is a pipeline of
// one micro-batch, idle most of the time; the notes say so and what would fill it.
TEST(ExplorationNotes, SayWhenTheBatchCannotFillThePipeline) {
  const auto graph = graph::LayerGraph::uniformChain(4, 1e-3, 1e-3, 1e-3, 4000, 1 << 20);
  const auto cluster = cluster::ClusterSpec::uniform(2, int64_t{1} << 30, 1e10, 1e-6);
  planner::ExploreOptions o;
  o.global_batch = 1;
  o.use_all_devices = true;
  const planner::Exploration e = planner::explore(graph, cluster, o);
  ASSERT_EQ(e.best().plan.numStages(), 2);
  const auto notes = explorationNotes(e);
  EXPECT_TRUE(anyNoteHas(notes, "makes 1 micro-batch(es) for 2 stages; a larger batch fills the pipeline"));

  o.global_batch = 16;  // enough micro-batches: no such note
  EXPECT_FALSE(anyNoteHas(explorationNotes(planner::explore(graph, cluster, o)), "fills the pipeline"));
}

}  // namespace
}  // namespace pipetrain::report
