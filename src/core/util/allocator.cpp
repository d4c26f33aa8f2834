#include "pipetrain/util/allocator.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <climits>  // also brings in <features.h>, which defines __GLIBC__
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipetrain::util {
namespace {

std::atomic<bool> retained{false};

// jemalloc's control interface, where jemalloc serves this process's malloc (linked or
// preloaded: its symbols then come first); nullptr under any other allocator.
using Mallctl = int (*)(const char*, void*, std::size_t*, void*, std::size_t);
Mallctl mallctlOfProcess() {
  static const Mallctl f = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  return f;
}

bool asksFor(const char* asked, const char* value) { return asked && std::strcmp(asked, value) == 0; }

}  // namespace

bool retainFreedMemory() {
#if defined(__GLIBC__)
  if (mallctlOfProcess()) return false;
  // M_MMAP_MAX 0: every block comes from an arena's heap, which is reused after free.
  // M_TRIM_THRESHOLD at its maximum: the heap's free top is never returned.
  // (Either alone still lets glibc unmap or trim a steady step's memory.)
  const bool applied = mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  retained = retained || applied;
  return applied;
#else
  return false;
#endif
}

bool applyHeapPolicyOfEnvironment() {
  if (mallctlOfProcess()) return true;  // preloaded with kJemallocRetainConf, or the user's
  const char* asked = std::getenv("PIPETRAIN_MALLOC");
  if (asksFor(asked, "glibc")) return false;
  if (asked && *asked && !asksFor(asked, "retain") && !asksFor(asked, "jemalloc"))
    std::fprintf(stderr,
                 "warning: PIPETRAIN_MALLOC=%s is none of 'jemalloc', 'retain' and 'glibc'; freed memory is retained\n",
                 asked);
  return retainFreedMemory();
}

std::optional<PreloadEnvironment> jemallocPreload(const char* asked, const char* ld_preload, const char* malloc_conf,
                                                  const std::string& library) {
  if (asked && *asked && !asksFor(asked, "jemalloc")) return std::nullopt;
  if (library.empty()) return std::nullopt;
  const std::string preloaded = ld_preload ? ld_preload : "";
  if (preloaded.find("jemalloc") != std::string::npos) return std::nullopt;
  return PreloadEnvironment{preloaded.empty() ? library : library + ":" + preloaded,
                            malloc_conf && *malloc_conf ? "" : kJemallocRetainConf};
}

std::string jemallocLibrary() {
  for (const char* path : {"/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
                           "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2", "/usr/local/lib/libjemalloc.so.2"})
    if (access(path, R_OK) == 0) return path;
  return "";
}

bool preloadJemallocForExec() {
  const std::optional<PreloadEnvironment> env =
      jemallocPreload(std::getenv("PIPETRAIN_MALLOC"), std::getenv("LD_PRELOAD"), std::getenv("MALLOC_CONF"),
                      jemallocLibrary());
  if (!env) return false;
  setenv("LD_PRELOAD", env->ld_preload.c_str(), 1);
  if (!env->malloc_conf.empty()) setenv("MALLOC_CONF", env->malloc_conf.c_str(), 1);
  return true;
}

std::string heapName() {
  if (mallctlOfProcess()) return "jemalloc";
#if defined(__GLIBC__)
  return retained ? "glibc, freed memory retained" : "glibc";
#else
  return "other";
#endif
}

int64_t jemallocStatBytes(const char* name) {
  const Mallctl mallctl = mallctlOfProcess();
  if (!mallctl) return -1;
  // The statistics are a snapshot, refreshed by writing to "epoch".
  uint64_t epoch = 1;
  std::size_t size = sizeof(epoch);
  mallctl("epoch", &epoch, &size, &epoch, size);
  std::size_t value = 0;
  size = sizeof(value);
  return mallctl(name, &value, &size, nullptr, 0) == 0 ? static_cast<int64_t>(value) : -1;
}

}  // namespace pipetrain::util
