// util::lowerPriorityOfThreadsStartedBy.
#include "pipetrain/util/thread_priority.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>

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

}  // namespace
}  // namespace pipetrain::util
