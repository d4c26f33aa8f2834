#include "pipetrain/torch/torch_info.h"

#include <chrono>

#include <torch/torch.h>
#include <torch/version.h>

#include "pipetrain/torch/transport.h"

namespace pipetrain::torchside {

std::string torchVersion() { return TORCH_VERSION; }

TorchInfo probeTorch(int n) {
  TorchInfo info;
  info.version = TORCH_VERSION;
  info.intra_op_threads = at::get_num_threads();
  info.cuda_available = torch::cuda::is_available();
  info.cuda_devices = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  info.nccl = runtime::ncclBuilt();
  info.matmul_size = n;

  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const torch::Tensor a = torch::randn({n, n});  // (n, n)
  const torch::Tensor b = torch::randn({n, n});  // (n, n)
  torch::Tensor c = torch::mm(a, b);             // warm-up: BLAS initialisation
  const int repeats = 5;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) c = torch::mm(a, b);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  info.matmul_gflops = 2.0 * n * n * n * repeats / seconds / 1e9;
  return info;
}

}  // namespace pipetrain::torchside
