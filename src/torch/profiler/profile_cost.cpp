// What a profile will cost, priced before it is taken (job/run_profile.cpp chooses the
// sizes to time from it): a training step of the whole model, the part of it each
// profiling process times, and the optimizer steps it times beside.
#include <numeric>

#include "profile_setup.h"
#include "threads_guard.h"
#include "../runtime/optimizer_state.h"
#include "pipetrain/torch/profiler.h"
#include "pipetrain/util/error.h"

namespace pipetrain::profiler {
namespace {

// `threads` intra-op threads while it lives (0: as they are), then as they were.
class ThreadsFor {
 public:
  explicit ThreadsFor(int threads) {
    if (threads > 0) at::set_num_threads(threads);
  }

 private:
  ThreadsGuard as_they_were_;  // taken before the constructor's body sets them
};

}  // namespace

double stepSeconds(const models::Model& model, int64_t batch, int threads, runtime::Precision precision) {
  if (batch < 1) throw Error("profile: the batch size must be at least 1, not " + std::to_string(batch));
  models::checkWiring(model);
  const ThreadsFor meanwhile(threads);
  ModelStateGuard state(model);
  const torch::Device device = deviceOf(model);
  const torch::Tensor input = typicalInput(model.input, batch).to(device);
  torch::Tensor labels;
  {
    torch::NoGradGuard no_grad;
    labels = typicalLabels(model, models::forwardModel(model, input));
  }
  std::vector<torch::Tensor> params;
  for (const models::Layer& layer : model.layers)
    for (const torch::Tensor& p : layer.module.ptr()->parameters())
      if (p.requires_grad()) params.push_back(p);
  // Gradients returned, not accumulated: the model's .grad stays as it was.
  const auto step = [&] {
    torch::Tensor loss;
    {
      runtime::AutocastScope autocast(precision, device);
      loss = models::lossOf(model, models::forwardModel(model, input), labels);
    }
    if (!params.empty()) torch::autograd::grad({loss}, params, {}, false, false, /*allow_unused=*/true);
  };
  step();  // the first touches memory and initialises the kernels
  return secondsOf(device, step);
}

std::vector<ShareWork> shareWork(const models::Model& model, int64_t batch, int shares, int threads,
                                 runtime::Precision precision) {
  if (batch < 1) throw Error("profile: the batch size must be at least 1, not " + std::to_string(batch));
  if (shares < 1) throw Error("profile: shares must be at least 1, not " + std::to_string(shares));
  models::checkWiring(model);
  const ThreadsFor meanwhile(threads);
  ModelStateGuard state(model);
  const torch::Device device = deviceOf(model);
  PreparedLayers prepared = prepareLayers(model, batch, precision, device);  // each layer's forward run once
  std::vector<double> forward;
  {
    torch::NoGradGuard no_grad;
    for (const LayerRun& run : prepared.runs) forward.push_back(secondsOf(device, [&] { run.forward(); }));
  }
  const double whole = std::accumulate(forward.begin(), forward.end(), 0.0);
  std::vector<ShareWork> work;
  for (int share = 0; share < shares; ++share) {
    ShareWork w;
    double timed = 0;
    for (int l : shareLayers(model, prepared.signatures, share, shares, /*time_identical_once=*/true).timed_layers) {
      timed += forward[l];
      for (const torch::Tensor& p : prepared.runs[l].params) w.stepped_parameters += p.numel();
    }
    w.forward_fraction = whole > 0 ? timed / whole : 1.0 / shares;
    work.push_back(w);
  }
  return work;
}

double optimizerSecondsPerParameter(const std::string& optimizer, int threads) {
  const ThreadsFor meanwhile(threads);
  constexpr int64_t kProbeParameters = int64_t{1} << 22;  // 16 MiB of fp32, and as much again per moment
  recipe::OptimizerOptions options;
  options.name = optimizer;
  torch::Tensor param = torch::zeros({kProbeParameters}, torch::requires_grad());
  const torch::Tensor grad = torch::zeros({kProbeParameters});
  const std::unique_ptr<torch::optim::Optimizer> step = runtime::makeOptimizer(options, 0.0, {param});
  const auto once = [&] {  // as LayerSteps::step: the gradient lent anew, the step, the gradient cleared
    param.mutable_grad() = grad;
    step->step();
    step->zero_grad();
  };
  once();  // the first makes the optimizer's state
  once();
  return secondsOf(torch::kCPU, once) / static_cast<double>(kProbeParameters);
}

}  // namespace pipetrain::profiler
