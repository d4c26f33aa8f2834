#include "torch_trace.h"

#include <set>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::set<ActivityType> activities() {
  std::set<ActivityType> a{ActivityType::CPU};
  if (torch::cuda::is_available()) a.insert(ActivityType::CUDA);
  return a;
}

}  // namespace

TorchTrace::TorchTrace(std::string path, int64_t first, int64_t steps)
    : path_(std::move(path)), first_(first), steps_(steps) {
  if (!path_.empty() && (first_ < 0 || steps_ < 1))
    throw Error("a trace starts after step 0 or later and spans at least one step");
  // Kineto's set-up (CUPTI's, on a GPU) costs seconds: done now, outside the steps.
  if (!path_.empty()) kineto::prepareProfiler(ProfilerConfig(ProfilerState::KINETO), activities());
}

TorchTrace::~TorchTrace() {
  if (running_) kineto::disableProfiler();  // a run that ended early writes nothing
}

void TorchTrace::stepDone(int64_t completed) {
  if (path_.empty() || written_) return;
  if (!running_ && completed == first_) {
    kineto::enableProfiler(ProfilerConfig(ProfilerState::KINETO), activities());
    running_ = true;
  } else if (running_ && completed >= first_ + steps_) {
    if (torch::cuda::is_available()) torch::cuda::synchronize();  // the kernels of the last step too
    const std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
    running_ = false;
    result->save(path_);
    written_ = true;
  }
}

}  // namespace pipetrain::runtime
