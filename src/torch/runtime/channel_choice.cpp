// Which channel carries a job's data: NCCL between ranks on GPUs of their own, Gloo
// otherwise (docs/gpu.md).
#include <unistd.h>

#include <functional>
#include <string>

#include "pipetrain/torch/device.h"
#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

// Every rank's GPU as (host, index), 0 for a CPU: each rank writes its own entry and a sum
// over the job gives all of them to all.
std::vector<int64_t> gpusOfRanks(Coordinator& coordinator, const torch::Device& device) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const int64_t host_id = static_cast<int64_t>(std::hash<std::string>{}(host) & ((int64_t{1} << 40) - 1));
  torch::Tensor all = torch::zeros({coordinator.worldSize()}, torch::kLong);
  if (deviceKind(device).ncclCapable()) all[coordinator.rank()] = host_id * 1024 + device.index() + 1;
  std::vector<torch::Tensor> list{all};
  coordinator.allReduceSum(list, coordinator.allRanks());
  return std::vector<int64_t>(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
}

}  // namespace

std::unique_ptr<DataChannel> openDataChannel(const std::string& wire, const Rendezvous& rendezvous,
                                             const torch::Device& device, Coordinator& coordinator) {
  if (wire == "gloo") return nullptr;
  if (wire != "auto" && wire != "nccl") throw Error("--wire " + wire + ": expected auto, gloo or nccl");
  // Every rank decides from the same facts, so all choose alike.
  std::string why_not;
  if (!ncclBuilt()) why_not = "this build has no NCCL";
  if (why_not.empty()) {
    const std::vector<int64_t> gpus = gpusOfRanks(coordinator, device);
    for (int r = 0; r < static_cast<int>(gpus.size()) && why_not.empty(); ++r) {
      if (gpus[r] == 0) why_not = "rank " + std::to_string(r) + " has no GPU";
      for (int q = 0; q < r && why_not.empty(); ++q)
        if (gpus[q] == gpus[r]) why_not = "ranks " + std::to_string(q) + " and " + std::to_string(r) + " share a GPU";
    }
  }
  if (why_not.empty()) return makeNcclChannel(rendezvous, device);
  if (wire == "nccl") throw Error("--wire nccl: " + why_not + " (NCCL needs a GPU of its own per rank; use --wire gloo)");
  return nullptr;
}

}  // namespace pipetrain::runtime
