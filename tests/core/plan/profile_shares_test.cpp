// Profiles taken in shares: which layers each concurrent profile times, and the merge of
// their graphs (each layer's times from the profile that timed it).
#include "pipetrain/plan/profile_shares.h"

#include <gtest/gtest.h>

#include "../expect_error.h"

namespace pipetrain::plan {
namespace {

// A chain whose layer l has `bytes[l]` of parameters and, in profile `timer`, times
// that say which profile it came from: forward = timer + 1 for every layer.
graph::LayerGraph chainProfile(const std::vector<int64_t>& bytes, int timer) {
  std::vector<graph::Layer> layers;
  for (std::size_t l = 0; l < bytes.size(); ++l) {
    graph::Layer layer;
    layer.name = "l" + std::to_string(l);
    if (l > 0) layer.inputs = {"l" + std::to_string(l - 1)};
    layer.param_bytes = bytes[l];
    layer.forward_seconds = timer + 1;
    layer.backward_input_seconds = 10 * (timer + 1);
    layer.backward_weight_seconds = 100 * (timer + 1);
    layer.split_weight_seconds = 1000 * (timer + 1);
    layer.optimizer_seconds = 0.5 * (timer + 1);
    layer.other_batches = {{128, {2.0 * (timer + 1), 0, 0, 0}}};
    layer.output_bytes = 64;
    layers.push_back(layer);
  }
  return graph::LayerGraph(layers, 32);
}

TEST(ProfileShares, BalanceParameterBytes) {
  EXPECT_EQ(profileShares({4, 4, 4, 4, 0}, 2), (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(profileShares({100, 1, 1, 1}, 2), (std::vector<int>{0, 1, 4}));  // bytes, not layer counts
  // Layers without parameters still count, so shares stay contiguous and non-empty.
  EXPECT_EQ(profileShares({0, 0, 0, 0}, 2), (std::vector<int>{0, 2, 4}));
  // Never more shares than layers.
  EXPECT_EQ(profileShares({5, 5}, 4), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(shareOfProcess(3, 2), 1);
}

TEST(ProfileShares, HoldAsManyMicrobatchesInFlightAsTheSchedulesRanks) {
  EXPECT_EQ(profileInFlight("1f1b", 2, 8), (std::vector<int>{2, 1}));
  EXPECT_EQ(profileInFlight("auto", 3, 8), (std::vector<int>{3, 2, 1}));  // not chosen yet: 1F1B's
  EXPECT_EQ(profileInFlight("gpipe", 2, 6), (std::vector<int>{6, 6}));
  EXPECT_EQ(profileInFlight("gpipe", 2, 64), (std::vector<int>{kMaxProfiledInFlight, kMaxProfiledInFlight}));
  EXPECT_EQ(profileInFlight("zb-h1", 2, 8), (std::vector<int>{2, 2}));  // the last rank defers its W
  EXPECT_EQ(profileInFlight("1f1b", 4, 2), (std::vector<int>{2, 2, 2, 1}));  // never more than m
  EXPECT_EQ(profileInFlight("2bw", 3, 2), (std::vector<int>{2, 2, 1}));  // m < p does not fit 2bw: 1F1B's
  const std::vector<int> v = profileInFlight("zb-v", 2, 8);  // two stages per rank, both counted
  ASSERT_EQ(v.size(), 2u);
  EXPECT_GE(v[0], 2);
}

TEST(ProfileShares, MergeTakesEachLayerFromTheProfileThatTimedIt) {
  const std::vector<int64_t> bytes = {4, 4, 4, 4, 0};
  const graph::LayerGraph merged = mergeProfileShares({chainProfile(bytes, 0), chainProfile(bytes, 1)});
  ASSERT_EQ(merged.size(), 5);
  for (int l = 0; l < 5; ++l) {
    const double timer = l < 2 ? 1 : 2;
    EXPECT_EQ(merged.layer(l).forward_seconds, timer);
    EXPECT_EQ(merged.layer(l).backward_input_seconds, 10 * timer);
    EXPECT_EQ(merged.layer(l).backward_weight_seconds, 100 * timer);
    EXPECT_EQ(merged.layer(l).split_weight_seconds, 1000 * timer);
    EXPECT_EQ(merged.layer(l).optimizer_seconds, 0.5 * timer);
    ASSERT_EQ(merged.layer(l).other_batches.size(), 1u);
    EXPECT_EQ(merged.layer(l).other_batches[0].seconds.forward, 2 * timer);
    EXPECT_EQ(merged.layer(l).param_bytes, bytes[l]);
  }
  EXPECT_EQ(merged.batchSize(), 32);
  // One profile is its own merge.
  EXPECT_EQ(mergeProfileShares({chainProfile(bytes, 0)}).layer(4).forward_seconds, 1);
  // The share that loaded the data measured what holding it costs.
  graph::LayerGraph loaded = chainProfile(bytes, 1);
  loaded.setProcessMemory({1 << 20, 0, 0});
  EXPECT_EQ(mergeProfileShares({chainProfile(bytes, 0), loaded}).processMemory().data_bytes, 1 << 20);
  // The framework: the most code any share's process paged in (a rank's passes are some
  // share's).
  graph::LayerGraph more_code = chainProfile(bytes, 1);
  more_code.setProcessMemory({0, 3 << 20, 0});
  graph::LayerGraph less_code = chainProfile(bytes, 0);
  less_code.setProcessMemory({0, 2 << 20, 0});
  EXPECT_EQ(mergeProfileShares({less_code, more_code}).processMemory().framework_bytes, 3 << 20);
}

TEST(ProfileShares, SharesTimedOnCoresOfDifferentSpeedsAreMergedAtTheSlowerCoresSpeed) {
  // The same layers, the second share's core three times as slow while it timed.
  const std::vector<int64_t> bytes = {4, 4, 4, 4};
  graph::LayerGraph fast = chainProfile(bytes, 0), slow = chainProfile(bytes, 2);
  fast.setProfiledAs({1, 2, 0.001});
  slow.setProfiledAs({1, 2, 0.003});
  const graph::LayerGraph merged = mergeProfileShares({fast, slow});
  for (int l = 0; l < 4; ++l) {
    EXPECT_DOUBLE_EQ(merged.layer(l).forward_seconds, 3) << l;
    EXPECT_DOUBLE_EQ(merged.layer(l).backward_input_seconds, 30) << l;
    EXPECT_DOUBLE_EQ(merged.layer(l).backward_weight_seconds, 300) << l;
    EXPECT_DOUBLE_EQ(merged.layer(l).split_weight_seconds, 3000) << l;
    EXPECT_DOUBLE_EQ(merged.layer(l).optimizer_seconds, 1.5) << l;
    EXPECT_DOUBLE_EQ(merged.layer(l).other_batches[0].seconds.forward, 6) << l;
  }
  EXPECT_DOUBLE_EQ(merged.profiledAs().probe_seconds, 0.003);
  EXPECT_EQ(merged.profiledAs().shares, 2);
  // The engine's call, timed by each share on its core: their mean at the slower speed.
  fast.setBackwardCallSeconds(2e-6);
  slow.setBackwardCallSeconds(9e-6);
  EXPECT_DOUBLE_EQ(mergeProfileShares({fast, slow}).backwardCallSeconds(), (3 * 2e-6 + 9e-6) / 2);
  // A share that did not measure its core's speed: the times as timed.
  slow.setProfiledAs({1, 2, 0});
  EXPECT_EQ(mergeProfileShares({fast, slow}).layer(0).forward_seconds, 1);
  EXPECT_EQ(mergeProfileShares({fast, slow}).layer(3).forward_seconds, 3);
  EXPECT_EQ(mergeProfileShares({fast, slow}).profiledAs().probe_seconds, 0);
}

TEST(ProfileShares, SizesTimedWhileTheCoreSlowedAreBroughtToItsMedianSpeed) {
  // Three sizes of one process's profile; the core ran twice as slow while the second
  // was timed, so its times (2 s a layer where 1 was due) come back to 1.
  std::vector<graph::LayerGraph> sizes = {chainProfile({4, 4}, 0), chainProfile({4, 4}, 1), chainProfile({4, 4}, 0)};
  sizes[0].setProfiledAs({1, 2, 0.001});
  sizes[1].setProfiledAs({1, 2, 0.002});
  sizes[2].setProfiledAs({1, 2, 0.0011});
  const std::vector<graph::LayerGraph> even = sizesAtOneCoreSpeed(sizes);
  ASSERT_EQ(even.size(), 3u);
  EXPECT_DOUBLE_EQ(even[1].layer(0).forward_seconds, 2 * 0.0011 / 0.002);
  EXPECT_DOUBLE_EQ(even[1].layer(1).backward_weight_seconds, 200 * 0.0011 / 0.002);
  EXPECT_DOUBLE_EQ(even[1].layer(0).other_batches[0].seconds.forward, 4 * 0.0011 / 0.002);
  EXPECT_DOUBLE_EQ(even[0].layer(0).forward_seconds, 1.1);
  EXPECT_DOUBLE_EQ(even[2].layer(0).forward_seconds, 1);
  for (const graph::LayerGraph& g : even) EXPECT_DOUBLE_EQ(g.profiledAs().probe_seconds, 0.0011);
  sizes[1].setBackwardCallSeconds(8e-6);  // timed on the slow core too
  EXPECT_DOUBLE_EQ(sizesAtOneCoreSpeed(sizes)[1].backwardCallSeconds(), 8e-6 * 0.0011 / 0.002);
  // A size that did not measure its core's speed (a GPU's profile): all as timed.
  sizes[2].setProfiledAs({1, 2, 0});
  EXPECT_DOUBLE_EQ(sizesAtOneCoreSpeed(sizes)[1].layer(0).forward_seconds, 2);
}

TEST(ProfileShares, MergeRefusesProfilesOfAnotherModel) {
  using testing::expectError;
  expectError([] { mergeProfileShares({}); }, {"no profiles"});
  expectError([] { mergeProfileShares({chainProfile({4, 4}, 0), chainProfile({4, 4, 4}, 1)}); },
              {"profile 1", "layer count"});
  expectError([] { mergeProfileShares({chainProfile({4, 4}, 0), chainProfile({4, 8}, 1)}); },
              {"profile 1", "layer 1", "l1"});
}

}  // namespace
}  // namespace pipetrain::plan
