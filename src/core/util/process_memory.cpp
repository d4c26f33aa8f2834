#include "pipetrain/util/process_memory.h"

#include <climits>  // brings in <features.h>, which defines __GLIBC__
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

#include "pipetrain/util/allocator.h"

namespace pipetrain::util {

int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

int64_t peakResidentBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

namespace {

// A field of /proc/self/status in bytes (the kernel gives kB); 0 where it does not say.
int64_t statusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == field) {
      int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

}  // namespace

int64_t residentFileBytes() { return statusBytes("RssFile:"); }

int64_t residentAnonBytes() { return statusBytes("RssAnon:"); }

int64_t heapFreeBytes() {
  // tcmalloc: what it took from the system and still maps, beyond the bytes handed out
  // (its page heap's free spans and its caches).
  if (const int64_t allocated = tcmallocStatBytes("generic.current_allocated_bytes"); allocated >= 0)
    return std::max<int64_t>(0, tcmallocStatBytes("generic.heap_size") -
                                    tcmallocStatBytes("tcmalloc.pageheap_unmapped_bytes") - allocated);
#if defined(__GLIBC__)
  return static_cast<int64_t>(mallinfo2().fordblks);
#else
  return -1;
#endif
}

int64_t heapInUseBytes() {
  if (const int64_t allocated = tcmallocStatBytes("generic.current_allocated_bytes"); allocated >= 0)
    return allocated;
#if defined(__GLIBC__)
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);  // the arenas' chunks and mmapped blocks
#else
  return -1;
#endif
}

}  // namespace pipetrain::util
