// The core clocks see a thread that takes turns with another on one core.
#include "pipetrain/util/core_time.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace pipetrain::util {
namespace {

// Spins on the calling thread for `seconds` of wall time and returns its times on and
// waiting for a core meanwhile.
ThreadCoreTime spinAndMeasure(double seconds) {
  const ThreadCoreTime before = threadCoreTime();
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<long> sink{0};
  while (std::chrono::steady_clock::now() < end) sink.fetch_add(1, std::memory_order_relaxed);
  const ThreadCoreTime after = threadCoreTime();
  return {after.running_seconds - before.running_seconds, after.waiting_seconds - before.waiting_seconds};
}

TEST(CoreTime, TwoThreadsOnOneCoreEachRunHalfAndWaitForTheOther) {
  if (threadCoreTime().waiting_seconds < 0) GTEST_SKIP() << "this kernel reports no scheduler statistics";
  cpu_set_t one_core;
  CPU_ZERO(&one_core);
  CPU_SET(sched_getcpu(), &one_core);
  ThreadCoreTime spent[2];
  std::thread threads[2];
  for (int i = 0; i < 2; ++i)
    threads[i] = std::thread([&, i] {
      ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one_core, &one_core), 0);
      spent[i] = spinAndMeasure(0.4);
    });
  for (auto& t : threads) t.join();
  // Sharing one core for 0.4 s, each thread runs about half of it and waits the rest.
  // Far looser bounds than that: a loaded machine only makes the waits longer and the
  // runs shorter, and the two together never exceed the core's 0.4 s.
  EXPECT_GT(spent[0].waiting_seconds + spent[1].waiting_seconds, 0.15);
  EXPECT_LE(spent[0].running_seconds + spent[1].running_seconds, 0.4 + 0.05);
  for (const ThreadCoreTime& t : spent) {
    EXPECT_GT(t.running_seconds, 0.02);
    EXPECT_LE(t.running_seconds + t.waiting_seconds, 0.4 + 0.05);
  }
}

}  // namespace
}  // namespace pipetrain::util
