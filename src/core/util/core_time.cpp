#include "pipetrain/util/core_time.h"

#include <time.h>

#include <fstream>

namespace pipetrain::util {

ThreadCoreTime threadCoreTime() {
  // Three numbers: nanoseconds on a core, nanoseconds waiting on a run queue, and the
  // time slices run.
  std::ifstream in("/proc/thread-self/schedstat");
  long long running_ns = 0, waiting_ns = 0;
  if (!(in >> running_ns >> waiting_ns)) return {};
  return {static_cast<double>(running_ns) * 1e-9, static_cast<double>(waiting_ns) * 1e-9};
}

double threadCpuSeconds() {
  timespec t{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return -1;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace pipetrain::util
