// The process's heap policy for training: freed memory stays with the process.
#pragma once

namespace pipetrain::util {

// Makes glibc's malloc keep freed memory for reuse instead of handing it back to the
// kernel: no mmap per large block, no trimming of the heap's top.
//
// Why: a training step allocates and frees the same large tensors (activations,
// gradients, received messages) every micro-batch. Under glibc's defaults blocks of a
// few MiB are mmap'd and munmap'd, or the heap is trimmed, so every step touches fresh
// pages again; on these VMs a page fault costs ~7 us, 13 ms per 4 MiB gradient. Measured
// on the 8x1024 mlp, 2-stage 1f1b (docs/profiling.md): 190k minor faults and 1400
// samples/s by default, 118k and 1900 with this policy. The process's footprint stays at
// its high-water mark, as a caching allocator's does (LibTorch's CUDA allocator, or
// jemalloc/tcmalloc, which PyTorch recommends for CPU training).
//
// A program-wide choice, so programs call it (pipetrain's main), not the libraries.
// No effect off glibc. Returns whether the policy was applied.
bool retainFreedMemory();

// The policy the environment asks for: retainFreedMemory(), unless PIPETRAIN_MALLOC is
// "glibc", which leaves glibc's defaults (or the user's GLIBC_TUNABLES) alone, as for a
// comparison with programs that run on them (bench/race). Another value is refused on
// stderr and the policy applied. Returns whether the policy was applied.
bool applyHeapPolicyOfEnvironment();

}  // namespace pipetrain::util
