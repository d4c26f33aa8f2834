// The core-wait clock sees a thread that takes turns with another on one core.
#include "pipetrain/util/core_wait.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace pipetrain::util {
namespace {

// Spins on the calling thread for `seconds` of wall time and returns its core wait meanwhile.
double spinAndMeasure(double seconds) {
  const double before = threadCoreWaitSeconds();
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<long> sink{0};
  while (std::chrono::steady_clock::now() < end) sink.fetch_add(1, std::memory_order_relaxed);
  return threadCoreWaitSeconds() - before;
}

TEST(CoreWait, TwoThreadsOnOneCoreEachWaitForTheOther) {
  if (threadCoreWaitSeconds() < 0) GTEST_SKIP() << "this kernel reports no scheduler statistics";
  cpu_set_t one_core;
  CPU_ZERO(&one_core);
  CPU_SET(sched_getcpu(), &one_core);
  double waited[2] = {0, 0};
  std::thread threads[2];
  for (int i = 0; i < 2; ++i)
    threads[i] = std::thread([&, i] {
      ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one_core, &one_core), 0);
      waited[i] = spinAndMeasure(0.4);
    });
  for (auto& t : threads) t.join();
  // Sharing one core for 0.4 s, each thread runs about half of it and waits the rest.
  // Far looser bounds than that: a loaded machine only makes the waits longer.
  EXPECT_GT(waited[0] + waited[1], 0.15);
  EXPECT_LE(waited[0], 0.4 + 0.05);
  EXPECT_LE(waited[1], 0.4 + 0.05);
}

}  // namespace
}  // namespace pipetrain::util
