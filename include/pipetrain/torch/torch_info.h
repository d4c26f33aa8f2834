// What the LibTorch side of pipetrain runs on: version, threads, devices, and a quick
// matmul measurement that exposes a slow BLAS (Debian's reference BLAS is ~10x slower
// than OpenBLAS). Kept free of LibTorch types so the CLI can include it cheaply.
#pragma once

#include <string>

namespace pipetrain::torchside {

struct TorchInfo {
  std::string version;     // e.g. "1.13.1"
  int intra_op_threads = 0;
  bool cuda_available = false;
  int cuda_devices = 0;
  bool nccl = false;  // this build has the NCCL data channel (runtime::ncclBuilt)
  double matmul_gflops = 0;  // fp32, n x n x n, on the CPU
  int matmul_size = 0;
};

std::string torchVersion();  // e.g. "2.11.0"

// Runs a few n x n fp32 matmuls (after a warm-up) to measure matmul_gflops.
TorchInfo probeTorch(int matmul_size = 512);

}  // namespace pipetrain::torchside
