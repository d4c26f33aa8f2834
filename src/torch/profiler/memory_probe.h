// Internal to the profiler: how much memory LibTorch allocates on one device while a
// probe is alive, as the device's kind counts it (runtime::DeviceKind::watchAllocations;
// docs/profiling.md#memory):
//
//  - CPU: exact bytes of tensor storage through the allocator's reporting hook, on the
//    calling thread, LibTorch's intra-op pool held at one thread meanwhile
//    (runtime/cpu_device.cpp);
//  - CUDA: the caching allocator's allocated-bytes statistics, the peak reset when the
//    probe starts (runtime/cuda_device.cpp; CUDA builds of LibTorch only);
//  - anything else: measures() is false.
//
// One probe at a time per thread; create and destroy it on the same thread.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "pipetrain/torch/device.h"

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
  std::unique_ptr<runtime::AllocationWatch> watch_;
};

}  // namespace pipetrain::profiler
