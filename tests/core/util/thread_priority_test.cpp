// util::lowerPriorityOfThreadsStartedBy and the PIPETRAIN_POLLING_NICE setting.
#include "pipetrain/util/thread_priority.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "pipetrain/util/error.h"

namespace pipetrain::util {
namespace {

// A thread started inside is lowered; the calling thread, started before, is not (19:
// the lowest priority, which any process may take, whatever nice value it runs at).
TEST(ThreadPriority, ThreadsStartedMeanwhileAreLoweredAndNoOthers) {
  const id_t self = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int own = getpriority(PRIO_PROCESS, self);
  std::atomic<long> id{0};
  std::atomic<bool> done{false};
  std::thread started;
  const int lowered = lowerPriorityOfThreadsStartedBy(
      [&] {
        started = std::thread([&] {
          id = syscall(SYS_gettid);
          while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        });
        while (id == 0) std::this_thread::yield();
      },
      19);
  EXPECT_EQ(lowered, 1);
  errno = 0;
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(id.load())), 19);
  EXPECT_EQ(getpriority(PRIO_PROCESS, self), own);
  done = true;
  started.join();
  EXPECT_EQ(lowerPriorityOfThreadsStartedBy([] {}, 19), 0);
}

TEST(ThreadPriority, ThePollingNiceIsTheTrainingThreadsUnlessSetAndRefusesNonsense) {
  EXPECT_EQ(pollingThreadNice(nullptr), 0);
  EXPECT_EQ(pollingThreadNice(""), 0);
  EXPECT_EQ(pollingThreadNice("0"), 0);
  EXPECT_EQ(pollingThreadNice("19"), 19);
  for (const char* bad : {"20", "-1", "high", "5x"}) {
    try {
      pollingThreadNice(bad);
      FAIL() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("PIPETRAIN_POLLING_NICE"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pipetrain::util
