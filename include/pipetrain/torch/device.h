// Which device a rank computes on, from `--device`: the one place that reads the option
// and asks LibTorch what the machine has.
#pragma once

#include <string>

#include <torch/torch.h>

namespace pipetrain::runtime {

// `spec`, for the rank that is `local_rank` on its host:
//   "cpu";
//   "cuda": GPU local_rank modulo the GPUs visible (several ranks may share one);
//   "cuda:N" or "cuda:N,M,...": GPU N, or the list's entry local_rank modulo its length;
//   "auto": "cuda" where LibTorch sees a GPU, "cpu" otherwise.
// A GPU that is asked for and absent, or a malformed spec, is an Error naming it.
torch::Device rankDevice(const std::string& spec, int local_rank);

// "cpu", or "cuda:0 (NVIDIA H200)": for the summary and the logs.
std::string describeDevice(const torch::Device& device);

// A GPU's memory in bytes; 0 for a CPU, or where the build cannot ask.
int64_t deviceMemoryBytes(const torch::Device& device);

}  // namespace pipetrain::runtime
