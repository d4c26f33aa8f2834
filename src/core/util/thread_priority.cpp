#include "pipetrain/util/thread_priority.h"

#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <system_error>

namespace pipetrain::util {
namespace {

std::set<long> threadIds() {
  std::set<long> ids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", error))
    ids.insert(std::strtol(entry.path().filename().c_str(), nullptr, 10));
  return ids;
}

}  // namespace

int lowerPriorityOfThreadsStartedBy(const std::function<void()>& start, int nice) {
  const std::set<long> before = threadIds();
  start();
  int lowered = 0;
  for (long id : threadIds())
    if (!before.count(id) && setpriority(PRIO_PROCESS, static_cast<id_t>(id), nice) == 0) ++lowered;
  return lowered;
}

}  // namespace pipetrain::util
