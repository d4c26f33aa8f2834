#include "pipetrain/torch/device.h"

#include <cstdlib>
#include <vector>

#include <torch/cuda.h>

#include "pipetrain/util/error.h"

#ifdef PIPETRAIN_WITH_CUDA  // set by CMakeLists.txt for CUDA builds of LibTorch
#include <cuda_runtime_api.h>
#endif

namespace pipetrain::runtime {
namespace {

int parseIndex(const std::string& text, const std::string& spec) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0 || v > 1023)
    throw Error("--device " + spec + ": '" + text + "' is not a GPU number");
  return static_cast<int>(v);
}

}  // namespace

torch::Device rankDevice(const std::string& spec, int local_rank) {
  if (spec == "cpu") return torch::kCPU;
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (spec == "auto") return gpus > 0 ? rankDevice("cuda", local_rank) : torch::Device(torch::kCPU);
  if (spec.rfind("cuda", 0) != 0)
    throw Error("--device " + spec + ": expected cpu, cuda, cuda:N, cuda:N,M,... or auto");
  if (gpus == 0)
    throw Error("--device " + spec + ": LibTorch sees no CUDA device on this machine (use --device cpu)");
  int index = local_rank % gpus;
  if (spec != "cuda") {
    if (spec[4] != ':') throw Error("--device " + spec + ": expected cuda or cuda:N");
    std::vector<int> list;
    std::string rest = spec.substr(5);
    for (std::size_t at = 0; at <= rest.size();) {
      const std::size_t comma = std::min(rest.find(',', at), rest.size());
      list.push_back(parseIndex(rest.substr(at, comma - at), spec));
      at = comma + 1;
    }
    index = list[static_cast<std::size_t>(local_rank) % list.size()];
    if (index >= gpus)
      throw Error("--device " + spec + ": GPU " + std::to_string(index) + " does not exist (" + std::to_string(gpus) +
                  " visible)");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::string describeDevice(const torch::Device& device) {
  std::string out = device.str();
#ifdef PIPETRAIN_WITH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess) out += std::string(" (") + prop.name + ")";
  }
#endif
  return out;
}

int64_t deviceMemoryBytes(const torch::Device& device) {
#ifdef PIPETRAIN_WITH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess) return static_cast<int64_t>(prop.totalGlobalMem);
  }
#endif
  (void)device;
  return 0;
}

}  // namespace pipetrain::runtime
