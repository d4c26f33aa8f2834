// sharedOrigin(): every rank ends up with rank 0's start time in its own clock.
#include <gtest/gtest.h>

#include <thread>

#include "pipetrain/torch/transport.h"

namespace pipetrain::runtime {
namespace {

TEST(SharedOrigin, RanksOfOneHostAgreeOnRankZerosStart) {
  constexpr int kRanks = 3;
  auto group = makeInProcessGroup(kRanks, std::chrono::seconds(10));
  std::vector<std::chrono::steady_clock::time_point> origins(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) threads.emplace_back([&, r] {
    // Late ranks: the origin is rank 0's moment, not whenever a rank arrives.
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * r));
    origins[r] = sharedOrigin(*group[r]);
  });
  for (auto& t : threads) t.join();
  for (int r = 1; r < kRanks; ++r) {
    // One clock for all threads: the estimated offset is the ping's asymmetry, microseconds.
    const double apart = std::chrono::duration<double>(origins[r] - origins[0]).count();
    EXPECT_LT(std::abs(apart), 2e-3) << "rank " << r;
  }
}

}  // namespace
}  // namespace pipetrain::runtime
