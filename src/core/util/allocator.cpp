#include "pipetrain/util/allocator.h"

#include <climits>  // also brings in <features.h>, which defines __GLIBC__
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipetrain::util {

bool retainFreedMemory() {
#if defined(__GLIBC__)
  // M_MMAP_MAX 0: every block comes from an arena's heap, which is reused after free.
  // M_TRIM_THRESHOLD at its maximum: the heap's free top is never returned.
  // (Either alone still lets glibc unmap or trim a steady step's memory.)
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
#else
  return false;
#endif
}

bool applyHeapPolicyOfEnvironment() {
  const char* asked = std::getenv("PIPETRAIN_MALLOC");
  if (asked && std::strcmp(asked, "glibc") == 0) return false;
  if (asked && *asked && std::strcmp(asked, "retain") != 0)
    std::fprintf(stderr, "warning: PIPETRAIN_MALLOC=%s is neither 'glibc' nor 'retain'; freed memory is retained\n",
                 asked);
  return retainFreedMemory();
}

}  // namespace pipetrain::util
