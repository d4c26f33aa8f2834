// The contract of a data channel that matches messages by the order each pair of ranks
// posts them, not by tag (NCCL): over the in-process transport's in-order mode, the
// executor trains every schedule whose Programs keep it (validateInOrderDelivery)
// bitwise as over tags, replicated stages and evaluation included; where a V schedule's
// Program does not, the run stops with an error that says so.
#include <gtest/gtest.h>

#include "pipetrain/schedule/program_check.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "training_harness.h"
#include "../core/expect_error.h"

namespace pipetrain::runtime {
namespace {

TrainConfig sixLayers(const std::string& schedule, const std::vector<int>& replicas, int chunks = 1) {
  TrainConfig c = smallConfig("mlp", {{"input", 16}, {"layers", 6}, {"width", 32}});
  c.plan.microbatches = 6;
  c.evaluate = true;  // the forward-only Programs cross the channel too
  usePlan(c, schedule, replicas, chunks);
  return c;
}

void expectSameParameters(const std::vector<RankResult>& got, const std::vector<RankResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t r = 0; r < got.size(); ++r) EXPECT_EQ(largestDifference(got[r].parameters, want[r].parameters), 0.0);
}

TEST(InOrderChannel, EveryScheduleThatKeepsTheOrderTrainsAsOverTags) {
  for (const std::string& name : schedule::scheduleNames()) {
    const schedule::ScheduleTraits& t = schedule::traits(name);
    if (t.placement == schedule::Placement::kV) continue;
    SCOPED_TRACE(name);
    const bool looped = t.placement == schedule::Placement::kLooped;
    std::vector<TrainConfig> configs{sixLayers(name, {1, 1, 1}, looped ? 2 : 1)};
    if (t.replicable) configs.push_back(sixLayers(name, {2, 1}));
    for (const TrainConfig& c : configs) {
      const int ranks = rankCount(c);
      std::vector<RankResult> ordered;
      try {
        ordered = runInProcess(c, ranks, Wire::kInProcessInOrder);
      } catch (const std::exception& e) {
        ADD_FAILURE() << ranks << " ranks: " << e.what();
        continue;
      }
      expectSameParameters(ordered, runInProcess(c, ranks, Wire::kInProcess));
    }
  }
}

// The V schedules keep the order on some shapes and not on others (the turn of the V
// crosses a chunk's activations with the other chunk's gradients): the channel agrees
// with the core's rule on each.
TEST(InOrderChannel, TheVSchedulesRunOverItWhereTheirProgramKeepsTheOrder) {
  int kept = 0, broken = 0;
  for (const std::string name : {"zb-v", "dualpipev"})
    for (int ranks : {2, 3}) {
      SCOPED_TRACE(name + " on " + std::to_string(ranks) + " ranks");
      TrainConfig c = sixLayers(name, std::vector<int>(ranks, 1));
      c.evaluate = false;
      bool keeps = true;
      try {
        schedule::validateInOrderDelivery(checkConfig(c, openModel(c), ranks));
      } catch (const Error&) {
        keeps = false;
      }
      if (keeps) {
        ++kept;
        expectSameParameters(runInProcess(c, ranks, Wire::kInProcessInOrder), runInProcess(c, ranks, Wire::kInProcess));
      } else {
        ++broken;
        testing::expectError([&] { runInProcess(c, ranks, Wire::kInProcessInOrder, {}, std::chrono::seconds(1)); },
                             {"different orders", "NCCL"});
      }
    }
  EXPECT_GT(kept, 0);
  EXPECT_GT(broken, 0);
}

}  // namespace
}  // namespace pipetrain::runtime
