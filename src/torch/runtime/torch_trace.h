// A Chrome trace of a few training steps by LibTorch's own profiler (Kineto): the host's
// operators and, on a GPU, its kernels and copies (through CUPTI), to see where a step's
// time goes, kernel by kernel and gap by gap (docs/gpu.md). `train --torch-trace FILE`
// writes rank r's to FILE.rank<r>.json; bench/plain_loop.cpp --trace FILE its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace pipetrain::runtime {

// `train --torch-trace`'s window starts after this many mini-batches: past the first
// steps' allocations and cuBLAS's choice of kernels.
constexpr int64_t kTraceAfterSteps = 20;

class TorchTrace {
 public:
  // Traces the steps after the `first`-th completed one until `steps` more have; an empty
  // `path` traces nothing.
  TorchTrace(std::string path, int64_t first, int64_t steps);
  ~TorchTrace();
  TorchTrace(const TorchTrace&) = delete;
  TorchTrace& operator=(const TorchTrace&) = delete;

  // Call on the training thread after each step, with the steps completed so far:
  // starts the profiler after the first-th, writes the trace after the last.
  void stepDone(int64_t completed);

 private:
  std::string path_;
  int64_t first_, steps_;
  bool running_ = false, written_ = false;
};

}  // namespace pipetrain::runtime
