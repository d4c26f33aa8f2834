#include "pipetrain/util/allocator.h"

#include <climits>  // also brings in <features.h>, which defines __GLIBC__

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

}  // namespace pipetrain::util
