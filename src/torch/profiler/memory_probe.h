// Internal to the profiler: how much memory LibTorch allocates on one device while a
// probe is alive. Where the figures come from (docs/profiling.md#memory):
//
//  - CPU: LibTorch's default CPU allocator reports every allocation and free to the
//    thread's memory-reporting hook (the one its own profiler uses with
//    profile_memory=true). The probe installs itself as that hook and keeps a running
//    total and its peak: exact bytes of tensor storage, not the process's RSS. Memory that
//    does not come from LibTorch's allocator (OpenBLAS and oneDNN scratch buffers, the
//    allocator's own overhead) is not seen. Only allocations on the calling thread (and
//    the autograd engine's, which inherits it) are reported, so the probe runs LibTorch's
//    intra-op pool at one thread while it is alive and restores it afterwards.
//  - CUDA (only in CUDA builds of LibTorch, PIPETRAIN_WITH_CUDA): the caching
//    allocator's allocated-bytes statistics, with the peak reset when the probe starts.
//  - Anything else: measures() is false.
//
// One probe at a time per thread; create and destroy it on the same thread.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/torch.h>

namespace pipetrain::profiler {

class MemoryProbe {
 public:
  explicit MemoryProbe(const torch::Device& device);
  ~MemoryProbe();
  MemoryProbe(const MemoryProbe&) = delete;
  MemoryProbe& operator=(const MemoryProbe&) = delete;

  bool measures() const;
  // Bytes allocated since the probe started and not yet freed.
  int64_t current() const;
  // The most bytes held at once since the probe started (above what was held before).
  int64_t peak() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pipetrain::profiler
