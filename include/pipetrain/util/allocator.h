// The process's heap for training: tcmalloc where the machine has it, freed memory kept
// with the process either way.
//
// Why tcmalloc: a training step allocates and frees the same tensors every micro-batch,
// in an order that changes with the schedule, and glibc's heap keeps the gaps this
// leaves. With its freed memory retained (below) a rank's heap grew all run long, much of
// it free. Under tcmalloc (gperftools' minimal build), whose size classes and page spans
// reuse freed memory for like requests, the same ranks peaked lower on every plan
// measured, at a speed within this machine's noise. jemalloc held about as little on
// most plans, but not reliably: the replicas of one plan held very different amounts
// from run to run, where tcmalloc held the same (bench/allocators.py; measured:
// docs/runtime.md, "The heap").
// PyTorch's own CPU launcher preloads tcmalloc or jemalloc for the same reason
// (torch.backends.xeon.run_cpu).
//
// How: `pipetrain` hands the torch commands to pipetrain-torch by exec; before it does,
// it preloads the machine's libtcmalloc_minimal.so.4 (LD_PRELOAD), told never to hand
// freed pages back (TCMALLOC_RELEASE_RATE=0) and not to report large allocations on
// stderr, unless the user set either; the ranks and profiling processes pipetrain-torch
// starts inherit all of it. PIPETRAIN_MALLOC chooses:
//   tcmalloc (the default): as above; glibc retained where the library is missing;
//   retain: glibc, freed memory retained (retainFreedMemory);
//   glibc: glibc's defaults, or the user's GLIBC_TUNABLES (for races against programs
//          that run on them, bench/race).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pipetrain::util {

// Makes glibc's malloc keep freed memory for reuse instead of handing it back to the
// kernel: no mmap per large block, no trimming of the heap's top.
//
// Why: under glibc's defaults blocks of a few MiB are mmap'd and munmap'd, or the heap
// is trimmed, so every step touches fresh pages again, and on these VMs page faults are
// dear: keeping freed memory cut the 8x1024 mlp's faults and raised its throughput
// (measured: docs/runtime.md, "The heap"). The process's footprint stays at its
// high-water mark, as a caching allocator's does.
//
// A program-wide choice, so programs call it (pipetrain's main), not the libraries.
// No effect off glibc, or where tcmalloc serves malloc. Returns whether it was applied.
bool retainFreedMemory();

// pipetrain-torch's policy, from PIPETRAIN_MALLOC: nothing to do where tcmalloc already
// serves malloc; retainFreedMemory() unless PIPETRAIN_MALLOC is "glibc". Another value
// is refused on stderr and treated as the default. Returns whether freed memory is kept.
bool applyHeapPolicyOfEnvironment();

// The environment that makes an exec'd program run on tcmalloc: LD_PRELOAD with
// `library` in front of `ld_preload`, and kTcmallocSettings for each of them the user has
// not set (`is_set`). None where `asked` (PIPETRAIN_MALLOC) chooses glibc, where
// `library` is empty, or where `ld_preload` already holds a tcmalloc.
struct PreloadEnvironment {
  std::string ld_preload;
  std::vector<std::pair<std::string, std::string>> settings;  // to set, name and value
};
inline const std::vector<std::pair<std::string, std::string>> kTcmallocSettings = {
    {"TCMALLOC_RELEASE_RATE", "0"},  // never hand freed pages back (each would fault in again)
    // A tensor of a GiB is no news in training; tcmalloc would print a stack for each.
    {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", "1152921504606846976"}};
std::optional<PreloadEnvironment> tcmallocPreload(const char* asked, const char* ld_preload,
                                                  bool (*is_set)(const std::string& name), const std::string& library);

// The machine's libtcmalloc_minimal.so.4 in the usual library folders; "" where none is.
std::string tcmallocLibrary();

// Sets this process's environment so that a program it execs runs on tcmalloc, where
// PIPETRAIN_MALLOC and the machine allow (tcmallocPreload). Returns whether it did.
bool preloadTcmallocForExec();

// Which allocator serves this process's malloc, as the run summary names it:
// kTcmallocHeap, "glibc, freed memory retained", "glibc" or "other".
inline constexpr const char* kTcmallocHeap = "tcmalloc";
std::string heapName();

// A tcmalloc statistic in bytes ("generic.current_allocated_bytes", ...), fresh as of
// this call; -1 where tcmalloc does not serve malloc or does not know the name.
int64_t tcmallocStatBytes(const char* name);

}  // namespace pipetrain::util
