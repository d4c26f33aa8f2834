// The process's heap for training: jemalloc where the machine has it, freed memory kept
// with the process either way.
//
// Why jemalloc: a training step allocates and frees the same tensors every micro-batch,
// in an order that changes with the schedule, and glibc's heap keeps the gaps this
// leaves. With its freed memory retained (below) a rank's heap grew all run long: the
// first rank of gpt's 2-stage PipeMare held 195 MiB of heap after its first step and
// 228 MiB after its 48th, 118 MiB of it free. Under jemalloc, whose size classes reuse
// freed blocks for like requests, the same ranks peaked 25% lower (160 and 111 MiB added
// by training against 116 and 85), data parallelism on gpt 6% lower, the mlp 15% lower,
// at the same speed and with fewer page faults (a throwaway A/B, 2026-12-01,
// docs/runtime.md#the-heap). PyTorch's own CPU launcher preloads jemalloc or tcmalloc
// for the same reason (torch.backends.xeon.run_cpu).
//
// How: `pipetrain` hands the torch commands to pipetrain-torch by exec; before it does,
// it preloads the machine's libjemalloc.so.2 (LD_PRELOAD) with a configuration that
// never hands freed pages back (MALLOC_CONF, unless the user set one), and the ranks and
// profiling processes pipetrain-torch starts inherit both. PIPETRAIN_MALLOC chooses:
//   jemalloc (the default): as above; glibc retained where the library is missing;
//   retain: glibc, freed memory retained (retainFreedMemory);
//   glibc: glibc's defaults, or the user's GLIBC_TUNABLES (for races against programs
//          that run on them, bench/race).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pipetrain::util {

// Makes glibc's malloc keep freed memory for reuse instead of handing it back to the
// kernel: no mmap per large block, no trimming of the heap's top.
//
// Why: under glibc's defaults blocks of a few MiB are mmap'd and munmap'd, or the heap
// is trimmed, so every step touches fresh pages again; on these VMs a page fault costs
// ~7 us, 13 ms per 4 MiB gradient. Measured on the 8x1024 mlp, 2-stage 1f1b
// (docs/profiling.md): 190k minor faults and 1400 samples/s by default, 118k and 1900
// with this policy. The process's footprint stays at its high-water mark, as a caching
// allocator's does.
//
// A program-wide choice, so programs call it (pipetrain's main), not the libraries.
// No effect off glibc, or where jemalloc serves malloc. Returns whether it was applied.
bool retainFreedMemory();

// pipetrain-torch's policy, from PIPETRAIN_MALLOC: nothing to do where jemalloc already
// serves malloc; retainFreedMemory() unless PIPETRAIN_MALLOC is "glibc". Another value
// is refused on stderr and treated as the default. Returns whether freed memory is kept.
bool applyHeapPolicyOfEnvironment();

// The environment that makes an exec'd program run on jemalloc: LD_PRELOAD with
// `library` in front of `ld_preload`, and MALLOC_CONF = kJemallocRetainConf unless
// `malloc_conf` is set. None where `asked` (PIPETRAIN_MALLOC) chooses glibc, where
// `library` is empty, or where `ld_preload` already holds a jemalloc.
struct PreloadEnvironment {
  std::string ld_preload;
  std::string malloc_conf;  // empty: leave the user's
};
inline constexpr const char* kJemallocRetainConf = "dirty_decay_ms:-1,muzzy_decay_ms:-1";
std::optional<PreloadEnvironment> jemallocPreload(const char* asked, const char* ld_preload, const char* malloc_conf,
                                                  const std::string& library);

// The machine's libjemalloc.so.2 in the usual library folders; "" where none is.
std::string jemallocLibrary();

// Sets this process's environment so that a program it execs runs on jemalloc, where
// PIPETRAIN_MALLOC and the machine allow (jemallocPreload). Returns whether it did.
bool preloadJemallocForExec();

// Which allocator serves this process's malloc, as the run summary names it: "jemalloc",
// "glibc, freed memory retained", "glibc" or "other".
std::string heapName();

// A jemalloc statistic in bytes ("stats.allocated", "stats.resident", ...), fresh as of
// this call; -1 where jemalloc does not serve malloc.
int64_t jemallocStatBytes(const char* name);

}  // namespace pipetrain::util
