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

struct Spent {
  ThreadCoreTime core;  // from the scheduler's statistics
  double cpu_seconds;   // from the thread's CPU clock
};

// Spins on the calling thread for `seconds` of wall time and returns its times on and
// waiting for a core meanwhile.
Spent spinAndMeasure(double seconds) {
  const ThreadCoreTime before = threadCoreTime();
  const double cpu_before = threadCpuSeconds();
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<long> sink{0};
  while (std::chrono::steady_clock::now() < end) sink.fetch_add(1, std::memory_order_relaxed);
  const double cpu_after = threadCpuSeconds();
  const ThreadCoreTime after = threadCoreTime();
  return {{after.running_seconds - before.running_seconds, after.waiting_seconds - before.waiting_seconds},
          cpu_after - cpu_before};
}

TEST(CoreTime, TwoThreadsOnOneCoreEachRunHalfAndWaitForTheOther) {
  if (threadCoreTime().waiting_seconds < 0) GTEST_SKIP() << "this kernel reports no scheduler statistics";
  cpu_set_t one_core;
  CPU_ZERO(&one_core);
  CPU_SET(sched_getcpu(), &one_core);
  Spent spent[2];
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
  EXPECT_GT(spent[0].core.waiting_seconds + spent[1].core.waiting_seconds, 0.15);
  EXPECT_LE(spent[0].core.running_seconds + spent[1].core.running_seconds, 0.4 + 0.05);
  for (const Spent& s : spent) {
    EXPECT_GT(s.core.running_seconds, 0.02);
    EXPECT_LE(s.core.running_seconds + s.core.waiting_seconds, 0.4 + 0.05);
    // The CPU clock counts the same running time, not the waits.
    EXPECT_NEAR(s.cpu_seconds, s.core.running_seconds, 0.02);
  }
}

}  // namespace
}  // namespace pipetrain::util
