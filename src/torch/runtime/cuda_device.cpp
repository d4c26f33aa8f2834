// CUDA GPUs as a device kind (torch/device.h). What needs the CUDA runtime or the
// caching allocator is compiled only in CUDA builds of LibTorch (PIPETRAIN_WITH_CUDA, set
// by CMakeLists.txt); elsewhere LibTorch sees no GPU and the kind has no device.
#include <cstdlib>

#include <torch/cuda.h>

#include "pipetrain/torch/device.h"
#include "pipetrain/util/error.h"

#ifdef PIPETRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
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

#ifdef PIPETRAIN_WITH_CUDA
// The caching allocator's allocated bytes on GPU `index`: current and peak.
c10::CachingAllocator::Stat allocatedBytes(int index) {
  constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[kAggregate];
}

// The caching allocator's statistics, the peak reset when the watch starts.
class CudaAllocationWatch : public AllocationWatch {
 public:
  explicit CudaAllocationWatch(int index) : index_(index) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
    base_ = allocatedBytes(index).current;
  }
  int64_t current() const override { return allocatedBytes(index_).current - base_; }
  int64_t peak() const override { return allocatedBytes(index_).peak - base_; }

 private:
  int index_;
  int64_t base_ = 0;
};
#endif

int gpuIndex(const torch::Device& device) { return device.has_index() ? device.index() : 0; }

class Cuda : public DeviceKind {
 public:
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }
  const char* forms() const override { return "cuda, cuda:N, cuda:N,M,..."; }
  int count() const override { return static_cast<int>(torch::cuda::device_count()); }

  std::optional<torch::Device> parse(const std::string& spec, int local_rank) const override {
    if (spec.rfind("cuda", 0) != 0) return std::nullopt;
    const int gpus = count();
    if (gpus == 0) throw Error("--device " + spec + ": LibTorch sees no CUDA device on this machine (use --device cpu)");
    int index = local_rank % gpus;
    if (spec != "cuda") {
      if (spec[4] != ':') throw Error("--device " + spec + ": expected cuda or cuda:N");
      std::vector<int> list;
      const std::string rest = spec.substr(5);
      for (std::size_t at = 0; at <= rest.size();) {
        const std::size_t comma = std::min(rest.find(',', at), rest.size());
        list.push_back(parseIndex(rest.substr(at, comma - at), spec));
        at = comma + 1;
      }
      index = list[static_cast<std::size_t>(local_rank) % list.size()];
      if (index >= gpus)
        throw Error("--device " + spec + ": GPU " + std::to_string(index) + " does not exist (" +
                    std::to_string(gpus) + " visible)");
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }

  std::string describe(const torch::Device& device) const override {
    std::string out = device.str();
#ifdef PIPETRAIN_WITH_CUDA
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, gpuIndex(device)) == cudaSuccess) out += std::string(" (") + prop.name + ")";
#endif
    return out;
  }

  int64_t memoryBytes(const torch::Device& device) const override {
#ifdef PIPETRAIN_WITH_CUDA
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, gpuIndex(device)) == cudaSuccess) return static_cast<int64_t>(prop.totalGlobalMem);
#endif
    (void)device;
    return 0;
  }

  void synchronize(const torch::Device& device) const override { torch::cuda::synchronize(gpuIndex(device)); }

  std::unique_ptr<AllocationWatch> watchAllocations(const torch::Device& device) const override {
#ifdef PIPETRAIN_WITH_CUDA
    return std::make_unique<CudaAllocationWatch>(gpuIndex(device));
#else
    (void)device;
    return nullptr;
#endif
  }

  bool ncclCapable() const override { return true; }
};

}  // namespace

const DeviceKind& cudaDevice() {
  static const Cuda kind;
  return kind;
}

}  // namespace pipetrain::runtime
