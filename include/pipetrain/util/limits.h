// What pipetrain serves. Requests beyond these are refused up front with a message,
// before any work: far above any real model or cluster, far below what would exhaust
// memory, take minutes, or overflow 64-bit and double arithmetic on the way.
#pragma once

#include <cstdint>
#include <string>

namespace pipetrain::limits {

inline constexpr int kMaxJsonDepth = 64;                 // nesting of any JSON document
inline constexpr int kMaxLayers = 20000;                 // in a layer graph
inline constexpr int kMaxDevices = 65536;                // in a cluster
inline constexpr int kMaxThreads = 4096;                 // a device computes on
inline constexpr int kMaxStages = 8192;                  // in a plan or a Program
inline constexpr int64_t kMaxMicrobatches = 65536;       // per mini-batch
inline constexpr int64_t kMaxMicrobatchSize = int64_t{1} << 24;  // samples
inline constexpr int64_t kMaxComputeActions = 20000000;  // F/B/I/W in one Program
inline constexpr int64_t kMaxBytes = int64_t{1} << 50;   // 1 PiB: any one size
inline constexpr double kMaxSeconds = 1e6;               // any one duration (11.6 days)
inline constexpr double kMinRate = 1e-9, kMaxRate = 1e18;  // speeds (relative), bandwidths (bytes/s)

// Throws Error unless a Program of `stages` stages (all ranks' together), `microbatches`
// per mini-batch and `minibatches` mini-batches stays within the limits above; `what`
// says where the numbers came from.
void checkProgramSize(int64_t stages, int64_t microbatches, int64_t minibatches, const std::string& what);

}  // namespace pipetrain::limits
