// The heap's share of a CPU rank's tensors: what the C allocator keeps freed beside them.
//
// A rank's heap never hands memory back (util::retainFreedMemory), and what its tensors
// free and cannot reuse stays resident, more where more passes through: over the 123
// ranks of bench/results/prediction-cases-20261201p.json, what a rank held beyond its
// priced tensors, its data and a figure per model grew by 0.40 of its tensors (0.15 for
// the mlp to 0.95 for the README's GPT-2; bench/heap_share_fit.py). The
// memory model adds this share to each CPU rank's prediction, and what a run teaches the
// profile (plan::frameworkBytesOfRun) is taken net of it. A GPU's caching allocator is
// measured as it is, without it.
#pragma once

#include <string>

namespace pipetrain::graph {

constexpr double kHeapKeptShare = 0.4;

// The share of its tensors that a rank on a device of `device_kind` holds beside them:
// kHeapKeptShare on a CPU, 0 elsewhere.
inline double heapShareOn(const std::string& device_kind) { return device_kind == "cpu" ? kHeapKeptShare : 0.0; }

// What the heap keeps freed beside `tensor_bytes` of a rank's tensors at their peak.
inline double heapKeptBeside(double tensor_bytes, const std::string& device_kind) {
  return heapShareOn(device_kind) * tensor_bytes;
}

// The tensors that `room` bytes of a device hold once the heap's share beside them is
// counted. What the planners let a stage use.
inline double tensorsFitting(double room, const std::string& device_kind) {
  return room / (1 + heapShareOn(device_kind));
}

}  // namespace pipetrain::graph
