#include "pipetrain/util/thread_priority.h"

#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>

#include "pipetrain/util/error.h"

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

int pollingThreadNice(const char* setting) {
  if (setting == nullptr || *setting == '\0') return 0;
  char* end = nullptr;
  const long nice = std::strtol(setting, &end, 10);
  if (*end != '\0' || nice < 0 || nice > 19)
    throw Error(std::string("PIPETRAIN_POLLING_NICE must be an integer from 0 to 19, not '") + setting + "'");
  return static_cast<int>(nice);
}

}  // namespace pipetrain::util
