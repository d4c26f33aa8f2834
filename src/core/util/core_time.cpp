#include "pipetrain/util/core_time.h"

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

}  // namespace pipetrain::util
