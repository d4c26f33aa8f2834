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

// tcmalloc's statistics, where tcmalloc serves this process's malloc (preloaded or
// linked: its symbols then come first); nullptr under any other allocator.
using GetNumericProperty = int (*)(const char*, std::size_t*);
GetNumericProperty tcmallocProperties() {
  static const auto f = reinterpret_cast<GetNumericProperty>(dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty"));
  return f;
}

bool asksFor(const char* asked, const char* value) { return asked && std::strcmp(asked, value) == 0; }

bool setInEnvironment(const std::string& name) { return std::getenv(name.c_str()) != nullptr; }

}  // namespace

bool retainFreedMemory() {
#if defined(__GLIBC__)
  if (tcmallocProperties()) return false;
  // M_MMAP_MAX 0: every block comes from an arena's heap, which is reused after free.
  // M_TRIM_THRESHOLD at its maximum: the heap's free top is never returned.
  // (Either alone still lets glibc unmap or trim a steady step's memory.)
  const bool applied = mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  if (applied) retained = true;
  return applied;
#else
  return false;
#endif
}

bool applyHeapPolicyOfEnvironment() {
  if (tcmallocProperties()) return true;  // preloaded with kTcmallocSettings, or the user's
  const char* asked = std::getenv("PIPETRAIN_MALLOC");
  if (asksFor(asked, "glibc")) return false;
  if (asked && *asked && !asksFor(asked, "retain") && !asksFor(asked, "tcmalloc"))
    std::fprintf(stderr,
                 "warning: PIPETRAIN_MALLOC=%s is none of 'tcmalloc', 'retain' and 'glibc'; freed memory is retained\n",
                 asked);
  return retainFreedMemory();
}

std::optional<PreloadEnvironment> tcmallocPreload(const char* asked, const char* ld_preload,
                                                  bool (*is_set)(const std::string& name), const std::string& library) {
  if (asked && *asked && !asksFor(asked, "tcmalloc")) return std::nullopt;
  if (library.empty()) return std::nullopt;
  const std::string preloaded = ld_preload ? ld_preload : "";
  if (preloaded.find("tcmalloc") != std::string::npos) return std::nullopt;
  PreloadEnvironment env{preloaded.empty() ? library : library + ":" + preloaded, {}};
  for (const auto& setting : kTcmallocSettings)
    if (!is_set(setting.first)) env.settings.push_back(setting);
  return env;
}

std::string tcmallocLibrary() {
  for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                          "/usr/local/lib"})
    if (const std::string path = std::string(dir) + "/libtcmalloc_minimal.so.4"; access(path.c_str(), R_OK) == 0)
      return path;
  return "";
}

bool preloadTcmallocForExec() {
  const std::optional<PreloadEnvironment> env =
      tcmallocPreload(std::getenv("PIPETRAIN_MALLOC"), std::getenv("LD_PRELOAD"), setInEnvironment, tcmallocLibrary());
  if (!env) return false;
  setenv("LD_PRELOAD", env->ld_preload.c_str(), 1);
  for (const auto& [name, value] : env->settings) setenv(name.c_str(), value.c_str(), 1);
  return true;
}

std::string heapName() {
  if (tcmallocProperties()) return kTcmallocHeap;
#if defined(__GLIBC__)
  return retained ? "glibc, freed memory retained" : "glibc";
#else
  return "other";
#endif
}

int64_t tcmallocStatBytes(const char* name) {
  const GetNumericProperty get = tcmallocProperties();
  std::size_t value = 0;
  return get && get(name, &value) ? static_cast<int64_t>(value) : -1;
}

}  // namespace pipetrain::util
