#include "optimizer_state.h"

#include <algorithm>
#include <map>

#include <ATen/ops/_fused_adam.h>

#include "pipetrain/schedule/staleness.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

// LibTorch keys an optimizer's state by the address of the parameter's TensorImpl.
void* keyOf(const torch::Tensor& param) { return param.unsafeGetTensorImpl(); }

const torch::Tensor& required(const std::map<std::string, torch::Tensor>& state, const std::string& name) {
  auto it = state.find(name);
  if (it == state.end()) throw Error("optimizer state: '" + name + "' is missing");
  return it->second;
}

torch::Tensor sameShape(const std::map<std::string, torch::Tensor>& state, const std::string& name,
                        const torch::Tensor& param) {
  const torch::Tensor& t = required(state, name);
  if (t.sizes() != param.sizes())
    throw Error("optimizer state: '" + name + "' has another shape than its parameter");
  return t.detach().to(param.device(), /*non_blocking=*/false, /*copy=*/true);  // a checkpoint's tensors are on the CPU
}

// LibTorch's Adam, whose step on a GPU is one fused kernel per group of parameters at
// one step count (at::_fused_adam_, what torch.optim.Adam(fused=True) runs) instead of
// about ten kernels per parameter (the 86M-parameter gpt's 150 parameters: some 1500
// launches a step, each a few microseconds of the host's time). The state is Adam's own (AdamParamState, so checkpoints
// and reshards read and write it alike); the update is the same arithmetic, in fp32 and
// with the bias corrections in fp32 rather than double. On the CPU, where a launch costs
// nothing, the step is Adam's, so that CPU training stays bitwise what it was.
class FusedAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;

  torch::Tensor step(LossClosure closure = nullptr) override {
    for (const auto& group : param_groups())
      for (const auto& p : group.params())
        if (!p.is_cuda()) return torch::optim::Adam::step(std::move(closure));
    torch::Tensor loss;
    if (closure) {
      torch::AutoGradMode enable_grad(true);
      loss = closure();
    }
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
      struct Batch {
        std::vector<at::Tensor> params, grads, avgs, squares, max_squares;
      };
      std::map<int64_t, Batch> by_step;  // the kernel takes one step count per parameter: batched by it
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& slot = state()[p.unsafeGetTensorImpl()];
        if (!slot) {
          auto s = std::make_unique<torch::optim::AdamParamState>();
          s->step(0);
          s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
          s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
          if (o.amsgrad()) s->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
          slot = std::move(s);
        }
        auto& s = static_cast<torch::optim::AdamParamState&>(*slot);
        s.step(s.step() + 1);
        Batch& b = by_step[s.step()];
        b.params.push_back(p);
        b.grads.push_back(p.grad());
        b.avgs.push_back(s.exp_avg());
        b.squares.push_back(s.exp_avg_sq());
        if (o.amsgrad()) b.max_squares.push_back(s.max_exp_avg_sq());
      }
      for (auto& [step, b] : by_step) {
        // One element per parameter, filled on the device: no host-to-device copy to wait for.
        const std::vector<at::Tensor> steps =
            torch::full({static_cast<int64_t>(b.params.size())}, static_cast<double>(step),
                        b.params.front().options().dtype(torch::kFloat))
                .unbind(0);
        at::_fused_adam_(b.params, b.grads, b.avgs, b.squares, b.max_squares, steps, o.lr(), std::get<0>(o.betas()),
                         std::get<1>(o.betas()), o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
      }
    }
    return loss;
  }
};

}  // namespace

double stepRate(double lr, int64_t step, int64_t warmup_steps, int t1_delay, int64_t t1_warmup_steps) {
  const double warmup =
      warmup_steps <= 0 ? 1.0 : std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(warmup_steps));
  return lr * warmup * schedule::learningRateScale(t1_delay, step, t1_warmup_steps);
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& name, double lr, double momentum,
                                                       std::vector<torch::Tensor> params) {
  if (name == "adam") return std::make_unique<FusedAdam>(params, torch::optim::AdamOptions(lr));
  if (name == "sgd")
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(momentum));
  throw Error("--optimizer must be adam or sgd, not '" + name + "'");
}

std::map<std::string, torch::Tensor> optimizerState(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  std::map<std::string, torch::Tensor> out;
  auto it = optimizer.state().find(keyOf(param));
  if (it == optimizer.state().end()) return out;
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
    out["adam.step"] = torch::tensor(adam->step(), torch::kLong);
    out["adam.exp_avg"] = adam->exp_avg();
    out["adam.exp_avg_sq"] = adam->exp_avg_sq();
    if (adam->max_exp_avg_sq().defined()) out["adam.max_exp_avg_sq"] = adam->max_exp_avg_sq();
  } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
    if (sgd->momentum_buffer().defined()) out["sgd.momentum_buffer"] = sgd->momentum_buffer();
  }
  return out;
}

void setOptimizerState(torch::optim::Optimizer& optimizer, const torch::Tensor& param,
                       const std::map<std::string, torch::Tensor>& state) {
  void* const key = keyOf(param);
  optimizer.state().erase(key);
  if (state.empty()) return;
  const std::string family = state.begin()->first.substr(0, state.begin()->first.find('.'));
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    if (family != "adam") throw Error("optimizer state: saved by " + family + ", loaded into adam");
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->step(required(state, "adam.step").item<int64_t>());
    s->exp_avg(sameShape(state, "adam.exp_avg", param));
    s->exp_avg_sq(sameShape(state, "adam.exp_avg_sq", param));
    if (state.count("adam.max_exp_avg_sq")) s->max_exp_avg_sq(sameShape(state, "adam.max_exp_avg_sq", param));
    optimizer.state()[key] = std::move(s);
  } else {
    if (family != "sgd") throw Error("optimizer state: saved by " + family + ", loaded into sgd");
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(sameShape(state, "sgd.momentum_buffer", param));
    optimizer.state()[key] = std::move(s);
  }
}

}  // namespace pipetrain::runtime
