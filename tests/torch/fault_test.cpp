// A rank that dies anywhere (forward, backward, all-reduce, step, the clock sync) ends
// every other rank within the transport's timeout, each with an error, and the healthy
// ranks' errors name the dead one. Faults go through FaultyTransport, the seam.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "faulty_transport.h"
#include "training_harness.h"

namespace pipetrain::runtime {
namespace {

constexpr int kRanks = 3;
constexpr auto kTimeout = std::chrono::milliseconds(1500);

TrainConfig faultConfig() {
  TrainConfig c = smallConfig("mlp", {{"input", 8}, {"layers", 3}, {"width", 16}, {"classes", 4}});
  c.max_steps_per_epoch = 6;
  usePlan(c, "1f1b", {2, 1});  // a replicated stage: the fault can strike in its all-reduce too
  return c;
}

// Runs the job with `dead`'s transport failing at operation `fail_after`; returns each
// rank's error ("" if it finished) and how long the job took.
std::pair<std::vector<std::string>, double> runWithFault(const TrainConfig& c, int dead, int64_t fail_after) {
  auto group = makeInProcessGroup(kRanks, kTimeout);
  std::vector<std::string> errors(kRanks);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      FaultyTransport transport(*group[r], r == dead ? fail_after : -1);
      try {
        trainRank(c, transport);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return {errors, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

TEST(Faults, ADeadRankEndsEveryRankWithinTheTimeoutNamingIt) {
  const TrainConfig c = faultConfig();
  ASSERT_EQ(rankCount(c), kRanks);
  // How many transport operations each rank makes in a healthy run.
  std::vector<int64_t> total(kRanks);
  {
    auto group = makeInProcessGroup(kRanks, kTimeout);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r)
      threads.emplace_back([&, r] {
        FaultyTransport counting(*group[r], -1);
        trainRank(c, counting);
        total[r] = counting.operations();
      });
    for (auto& t : threads) t.join();
  }
  std::mt19937 rng(7);  // fixed points: the test replays exactly
  for (int trial = 0; trial < 6; ++trial) {
    const int dead = trial % kRanks;
    const int64_t at = std::uniform_int_distribution<int64_t>(0, total[dead] - 1)(rng);
    const auto [errors, seconds] = runWithFault(c, dead, at);
    SCOPED_TRACE("rank " + std::to_string(dead) + " dies at operation " + std::to_string(at) + " of " +
                 std::to_string(total[dead]));
    char figure[96];
    std::snprintf(figure, sizeof figure, "rank %d dies at operation %lld of %lld; all ranks ended after %.2f s", dead,
                  static_cast<long long>(at), static_cast<long long>(total[dead]), seconds);
    RecordProperty("trial_" + std::to_string(trial), figure);  // in --gtest_output's file
    EXPECT_NE(errors[dead].find("injected fault"), std::string::npos) << errors[dead];
    // No hang: every rank gave up within a few timeouts (each waits on one peer at a time).
    EXPECT_LT(seconds, 4 * std::chrono::duration<double>(kTimeout).count() + 2);
    // A healthy rank that waited on the dead one says so.
    bool named = false;
    for (int r = 0; r < kRanks; ++r)
      if (r != dead) named = named || errors[r].find("rank " + std::to_string(dead)) != std::string::npos;
    EXPECT_TRUE(named) << "rank 0: " << errors[0] << "\nrank 1: " << errors[1] << "\nrank 2: " << errors[2];
  }
}

}  // namespace
}  // namespace pipetrain::runtime
