#include "pipetrain/plan/partition.h"

#include <gtest/gtest.h>

#include "../expect_error.h"

namespace pipetrain::plan {
namespace {

TEST(Partition, BalancesTheLargestStage) {
  EXPECT_EQ(balancedChainSplit({1, 1, 1, 1}, 2), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(balancedChainSplit({5, 1, 1, 1, 1, 1}, 2), (std::vector<int>{0, 1, 6}));
  EXPECT_EQ(balancedChainSplit({1, 2, 3}, 3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(balancedChainSplit({3, 3, 3}, 1), (std::vector<int>{0, 3}));
}

TEST(Partition, MatchesExhaustiveSearchOnSmallChains) {
  const std::vector<double> costs = {4, 1, 7, 2, 2, 9, 1, 3};
  for (int parts = 1; parts <= 4; ++parts) {
    const auto b = balancedChainSplit(costs, parts);
    auto maxRun = [&](const std::vector<int>& bounds) {
      double worst = 0;
      for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
        double sum = 0;
        for (int l = bounds[i]; l < bounds[i + 1]; ++l) sum += costs[l];
        worst = std::max(worst, sum);
      }
      return worst;
    };
    // every way of choosing parts-1 cut points among 7 gaps
    double optimum = 1e18;
    for (int mask = 0; mask < (1 << 7); ++mask) {
      if (__builtin_popcount(mask) != parts - 1) continue;
      std::vector<int> bounds{0};
      for (int g = 0; g < 7; ++g)
        if (mask & (1 << g)) bounds.push_back(g + 1);
      bounds.push_back(8);
      optimum = std::min(optimum, maxRun(bounds));
    }
    EXPECT_DOUBLE_EQ(maxRun(b), optimum) << parts << " parts";
  }
}

TEST(Partition, RefusesMoreStagesThanLayers) {
  testing::expectError([] { balancedChainSplit({1, 2}, 3); }, {"2 layers", "3 stages"});
}

}  // namespace
}  // namespace pipetrain::plan
