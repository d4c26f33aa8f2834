// What `--wire` chooses, as a rule free of LibTorch: runtime::openDataChannel follows it
// when the ranks start, and the planner (job::localSums) prices it before.
#pragma once

#include <string>

namespace pipetrain::runtime {

// Whether `wire` sums in shared memory between ranks that all compute on the CPU
// (`cpu_ranks`) of one host (`one_host`): "shm", or "auto" there (where NCCL, which
// "auto" prefers, needs GPUs).
bool sumsInSharedMemory(const std::string& wire, bool cpu_ranks, bool one_host);

}  // namespace pipetrain::runtime
