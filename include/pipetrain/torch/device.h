// Which device a rank computes on, and what each kind of device does for it: the one
// place that reads `--device` and asks LibTorch what the machine has. Each kind (cpu,
// cuda) is a row of deviceKinds() in a file of its own (runtime/cpu_device.cpp,
// runtime/cuda_device.cpp); profiling, training and the data channel ask the rank's
// device's kind rather than testing for CUDA themselves.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace pipetrain::runtime {

// The bytes LibTorch allocates on one device while it is alive (profiler/memory_probe.h).
class AllocationWatch {
 public:
  virtual ~AllocationWatch() = default;
  virtual int64_t current() const = 0;  // allocated since it started and not yet freed
  virtual int64_t peak() const = 0;     // the most held at once since it started, above what was held before
};

class DeviceKind {
 public:
  virtual ~DeviceKind() = default;
  virtual c10::DeviceType type() const = 0;
  // How --device names it ("cuda, cuda:N, cuda:N,M,...").
  virtual const char* forms() const = 0;
  // Devices of this kind LibTorch sees here (the CPU: 1).
  virtual int count() const = 0;
  // The device `spec` names for the rank that is `local_rank` on its host, where `spec`
  // names this kind; nullopt where it names another. Error where it is malformed or the
  // device is absent.
  virtual std::optional<torch::Device> parse(const std::string& spec, int local_rank) const = 0;
  // "cpu", or "cuda:0 (NVIDIA H200)": for the summary and the logs.
  virtual std::string describe(const torch::Device& device) const { return device.str(); }
  // Its own memory in bytes; 0 where it computes in the host's memory (or the build cannot ask).
  virtual int64_t memoryBytes(const torch::Device&) const { return 0; }
  // Waits until the work queued on it is done (timing needs it where work is asynchronous).
  virtual void synchronize(const torch::Device&) const {}
  // Counts what LibTorch's allocator gives out on it from now on; nullptr where it cannot.
  virtual std::unique_ptr<AllocationWatch> watchAllocations(const torch::Device& device) const = 0;
  // Whether NCCL can carry its tensors between ranks (runtime/channel_choice.h).
  virtual bool ncclCapable() const { return false; }
};

// The table of kinds, the CPU first.
const std::vector<const DeviceKind*>& deviceKinds();
const DeviceKind& deviceKind(const torch::Device& device);

// `spec`, for the rank that is `local_rank` on its host:
//   "cpu";
//   "cuda": GPU local_rank modulo the GPUs visible (several ranks may share one);
//   "cuda:N" or "cuda:N,M,...": GPU N, or the list's entry local_rank modulo its length;
//   "auto": the first kind after the CPU that has a device here, else "cpu".
// A device that is asked for and absent, or a malformed spec, is an Error naming it.
torch::Device rankDevice(const std::string& spec, int local_rank);

// deviceKind(device).describe(device) and .memoryBytes(device).
std::string describeDevice(const torch::Device& device);
int64_t deviceMemoryBytes(const torch::Device& device);

}  // namespace pipetrain::runtime
