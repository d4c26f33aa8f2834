// The contract of a data channel that matches messages by the order each pair of ranks
// posts them, not by tag (NCCL): over the in-process transport's in-order mode, the
// executor trains every schedule (their Programs keep it: validateInOrderDelivery)
// bitwise as over tags, replicated stages, evaluation and the V placements included; a
// receive posted out of the sender's order is an error that says so.
#include <gtest/gtest.h>

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

TEST(InOrderChannel, EveryScheduleTrainsAsOverTags) {
  for (const std::string& name : schedule::scheduleNames()) {
    const schedule::ScheduleTraits& t = schedule::traits(name);
    SCOPED_TRACE(name);
    const bool looped = t.placement == schedule::Placement::kLooped;
    std::vector<TrainConfig> configs{sixLayers(name, {1, 1, 1}, looped ? 2 : 1)};
    if (t.placement == schedule::Placement::kV) configs.push_back(sixLayers(name, {1, 1}));
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

// The channel pairs each receive with the sender's message of the same place in its
// order, as NCCL would, and names both when their tags differ.
TEST(InOrderChannel, AReceiveOutOfTheSendersOrderIsAnError) {
  auto group = makeInProcessGroup(2, std::chrono::seconds(1), /*in_order=*/true);
  group[0]->send(torch::ones({2}), 1, 7)->wait();
  group[0]->send(torch::zeros({2}), 1, 9)->wait();
  testing::expectError([&] { group[1]->recv(torch::empty({2}), 0, 9)->wait(); }, {"different orders", "NCCL"});
}

}  // namespace
}  // namespace pipetrain::runtime
