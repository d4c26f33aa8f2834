// The heap's share of a CPU rank's tensors: what the C allocator keeps freed beside them.
//
// A rank's heap never hands memory back (util/allocator.h), and what its tensors free
// and the allocator cannot reuse stays resident, more where more passes through. Fitted
// over the 123 ranks of a bench run as what a rank held beyond its priced tensors, its
// data and a figure per model (bench/heap_share_fit.py):
//  - tcmalloc, which ranks run on where the machine has it: 0.11 of the tensors
//    (bench/results/prediction-cases-20261201s.json; by model -0.04 for the mlp to 0.55
//    for the README's GPT-2);
//  - glibc with its freed memory retained: 0.40 (-20261201p; 0.15 to 0.95 by model).
// The memory model adds the share of the heap the profile's processes ran on
// (graph::ProcessMemory::heap) to each CPU rank's prediction, and what a run teaches the
// profile (plan::frameworkBytesOfRun) is taken net of it. A GPU's caching allocator is
// measured as it is, without it.
#pragma once

#include <string>

#include "pipetrain/util/allocator.h"

namespace pipetrain::graph {

constexpr double kTcmallocKeptShare = 0.11;
constexpr double kGlibcKeptShare = 0.40;

// The share of its tensors that a rank on a device of `device_kind` holds beside them,
// on `heap` (util::heapName; "" for a profile that did not record it, taken on glibc):
// 0 off the CPU.
inline double heapShareOn(const std::string& device_kind, const std::string& heap) {
  if (device_kind != "cpu") return 0.0;
  return heap == util::kTcmallocHeap ? kTcmallocKeptShare : kGlibcKeptShare;
}

// What the heap keeps freed beside `tensor_bytes` of a rank's tensors at their peak.
inline double heapKeptBeside(double tensor_bytes, const std::string& device_kind, const std::string& heap) {
  return heapShareOn(device_kind, heap) * tensor_bytes;
}

// The tensors that `room` bytes of a device hold once the heap's share beside them is
// counted. What the planners let a stage use.
inline double tensorsFitting(double room, const std::string& device_kind, const std::string& heap) {
  return room / (1 + heapShareOn(device_kind, heap));
}

}  // namespace pipetrain::graph
