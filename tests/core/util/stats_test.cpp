#include "pipetrain/util/stats.h"

#include <gtest/gtest.h>

namespace pipetrain::util {
namespace {

TEST(Stats, TheMedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({}), 0);
}

TEST(Stats, ACappedMeanCountsTheSlowValuesARunPays) {
  // Nine passes at 1.0 and one at 1.5: the median (1.0) leaves the slow one out, the
  // mean a run pays counts it.
  std::vector<double> passes(9, 1.0);
  passes.push_back(1.5);
  EXPECT_DOUBLE_EQ(median(passes), 1.0);
  EXPECT_DOUBLE_EQ(cappedMean(passes, 3), 1.05);
}

TEST(Stats, ACappedMeanCountsAnOutlierAtItsCap) {
  // One pass that lost its core for 100 times its work counts as 3 passes' worth.
  std::vector<double> passes(9, 1.0);
  passes.push_back(100);
  EXPECT_DOUBLE_EQ(cappedMean(passes, 3), 1.2);
  EXPECT_DOUBLE_EQ(cappedMean({}, 3), 0);
  EXPECT_DOUBLE_EQ(cappedMean({2, 2}, 1), 2);
}

}  // namespace
}  // namespace pipetrain::util
