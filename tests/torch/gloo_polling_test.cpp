// The Gloo transport's polling threads run at PIPETRAIN_POLLING_NICE's priority, which
// `train`'s launcher sets where ranks outnumber the cores (util/thread_priority.h).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/thread_priority.h"

namespace pipetrain::runtime {
namespace {

int threadsAtNice(int nice) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    errno = 0;
    const int at = getpriority(PRIO_PROCESS, static_cast<id_t>(std::stol(entry.path().filename().string())));
    if (errno == 0 && at == nice) ++count;
  }
  return count;
}

Rendezvous oneRank() {
  Rendezvous rv;
  rv.master_port = 31000 + static_cast<int>(::getpid() % 1000);
  rv.world_size = 1;
  rv.timeout = std::chrono::seconds(20);
  return rv;
}

TEST(GlooPolling, TheTransportsPollingThreadYieldsToTraining) {
  const int before = threadsAtNice(util::kPollingThreadNice);
  errno = 0;
  const int own = getpriority(PRIO_PROCESS, 0);
  const Rendezvous rv = oneRank();
  ::setenv("PIPETRAIN_POLLING_NICE", std::to_string(util::kPollingThreadNice).c_str(), 1);
  const std::unique_ptr<Transport> transport = makeGlooTransport(rv);
  ::unsetenv("PIPETRAIN_POLLING_NICE");
  EXPECT_GT(threadsAtNice(util::kPollingThreadNice), before);
  errno = 0;
  EXPECT_EQ(getpriority(PRIO_PROCESS, 0), own);  // the calling (training) thread keeps its own
}

// Unset, empty or 0, the threads keep the training thread's priority; anything but an
// integer from 0 to 19 is refused, naming the variable, before the transport opens a
// socket.
TEST(GlooPolling, ThePollingNiceIsTheTrainingThreadsUnlessSetAndRefusesNonsense) {
  const Rendezvous rv = oneRank();
  for (const char* same : {static_cast<const char*>(nullptr), "", "0"}) {
    SCOPED_TRACE(std::string("PIPETRAIN_POLLING_NICE='") + (same ? same : "(unset)") + "'");
    const int before = threadsAtNice(util::kPollingThreadNice);
    if (same) ::setenv("PIPETRAIN_POLLING_NICE", same, 1);
    const std::unique_ptr<Transport> transport = makeGlooTransport(rv);
    ::unsetenv("PIPETRAIN_POLLING_NICE");
    EXPECT_EQ(threadsAtNice(util::kPollingThreadNice), before);
  }
  for (const char* bad : {"20", "-1", "high", "5x"}) {
    ::setenv("PIPETRAIN_POLLING_NICE", bad, 1);
    try {
      makeGlooTransport(rv);
      FAIL() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("PIPETRAIN_POLLING_NICE"), std::string::npos) << e.what();
    }
    ::unsetenv("PIPETRAIN_POLLING_NICE");
  }
}

}  // namespace
}  // namespace pipetrain::runtime
