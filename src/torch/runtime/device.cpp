// The table of device kinds (torch/device.h): a new kind is a file of its own and a row here.
#include "pipetrain/torch/device.h"

#include "pipetrain/util/error.h"

namespace pipetrain::runtime {

const DeviceKind& cpuDevice();   // cpu_device.cpp
const DeviceKind& cudaDevice();  // cuda_device.cpp

const std::vector<const DeviceKind*>& deviceKinds() {
  static const std::vector<const DeviceKind*> table{
      &cpuDevice(),
      &cudaDevice(),
  };
  return table;
}

const DeviceKind& deviceKind(const torch::Device& device) {
  for (const DeviceKind* kind : deviceKinds())
    if (kind->type() == device.type()) return *kind;
  throw Error("device " + device.str() + ": pipetrain does not compute on this kind of device");
}

torch::Device rankDevice(const std::string& spec, int local_rank) {
  const std::vector<const DeviceKind*>& kinds = deviceKinds();
  if (spec == "auto") {
    for (const DeviceKind* kind : kinds)
      if (kind != kinds.front() && kind->count() > 0) return *kind->parse(torch::Device(kind->type()).str(), local_rank);
    return *kinds.front()->parse(torch::Device(kinds.front()->type()).str(), local_rank);
  }
  std::string forms;
  for (const DeviceKind* kind : kinds) {
    if (std::optional<torch::Device> device = kind->parse(spec, local_rank)) return *device;
    forms += std::string(kind->forms()) + ", ";
  }
  throw Error("--device " + spec + ": expected " + forms + "or auto");
}

std::string describeDevice(const torch::Device& device) { return deviceKind(device).describe(device); }

int64_t deviceMemoryBytes(const torch::Device& device) { return deviceKind(device).memoryBytes(device); }

}  // namespace pipetrain::runtime
