// Staleness read off Programs, PipeMare's formulas, and the schedule table.
#include "pipetrain/schedule/staleness.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pipetrain/schedule/schedules.h"

namespace pipetrain::schedule {
namespace {

Program programOnChain(const std::string& name, int p, int m, int minibatches) {
  ScheduleSpec spec;
  spec.name = name;
  spec.microbatches = m;
  spec.minibatches = minibatches;
  return buildProgram(spec, chainDag(p));
}

TEST(Staleness, FlushingSchedulesHaveNoDelay) {
  for (const auto& delays : forwardDelays(programOnChain("1f1b", 3, 4, 3)))
    for (int d : delays) EXPECT_EQ(d, 0);
}

TEST(Staleness, PipeDreamDelayIsTheWarmupDepth) {
  // Stage s of p steps after every backward; p - 1 - s backward passes of earlier
  // micro-batches run between a micro-batch's forward and its backward.
  const Program program = programOnChain("pipedream", 4, 4, 4);
  const auto delays = forwardDelays(program);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(delays[s][8], 3 - s) << "stage " << s;
  EXPECT_EQ(stageDelays(program), (std::vector<int>{3, 2, 1, 1}));  // at least 1
}

TEST(Staleness, PipeMareFormulas) {
  // T1: tau^-(1 - min(k/K, 1)).
  EXPECT_DOUBLE_EQ(learningRateScale(4, 0, 10), 0.25);
  EXPECT_DOUBLE_EQ(learningRateScale(4, 5, 10), 0.5);
  EXPECT_DOUBLE_EQ(learningRateScale(4, 10, 10), 1.0);
  EXPECT_DOUBLE_EQ(learningRateScale(4, 50, 10), 1.0);
  EXPECT_DOUBLE_EQ(learningRateScale(1, 0, 10), 1.0);
  EXPECT_DOUBLE_EQ(learningRateScale(4, 0, 0), 1.0);  // no warm-up
  // T2: gamma = D^(1/tau).
  EXPECT_DOUBLE_EQ(correctionDecay(0.1, 1), 0.1);
  EXPECT_NEAR(correctionDecay(0.1, 2), std::sqrt(0.1), 1e-15);
}

TEST(ScheduleTable, EveryNameRoundTripsAndAsynchronyIsStated) {
  for (const std::string& name : scheduleNames()) EXPECT_EQ(traits(traits(name).kind).name, name);
  EXPECT_TRUE(traits("pipedream").asynchronous);
  EXPECT_TRUE(traits("2bw").asynchronous);
  EXPECT_TRUE(traits("pipemare").asynchronous);
  EXPECT_FALSE(traits("1f1b").asynchronous);
  EXPECT_EQ(traits("pipemare").backward_weights, BackwardWeights::kLatest);
  // The planner's bounds: PipeDream holds a version per micro-batch in flight, 2BW two.
  EXPECT_EQ(weightCopiesBound(ScheduleKind::kPipeDream, 3, 0), 4);
  EXPECT_EQ(weightCopiesBound(ScheduleKind::k2BW, 3, 0), 3);
  EXPECT_EQ(inflightMicrobatchesBound(ScheduleKind::kGpipe, 3, 8), 8);
  EXPECT_EQ(inflightMicrobatchesBound(ScheduleKind::k1F1B, 3, 2), 2);
  EXPECT_EQ(inflightMicrobatchesBound(ScheduleKind::kPipeDream, 3, 2), 3);  // never drains
}

}  // namespace
}  // namespace pipetrain::schedule
