#include "optimizer_state.h"

#include <algorithm>
#include <map>

#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>

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

// LibTorch's Adam and AdamW, whose step on a GPU is one fused kernel per group of
// parameters at one step count (at::_fused_adam_ and at::_fused_adamw_, what
// torch.optim.Adam(fused=True) and AdamW(fused=True) run) instead of about ten kernels per
// parameter (the 86M-parameter gpt's 150 parameters: some 1500 launches a step, each a
// few microseconds of the host's time). The state is the optimizer's own
// (AdamParamState, AdamWParamState: checkpoints and reshards read and write it alike);
// the update is the same arithmetic, in fp32 and with the bias corrections in fp32
// rather than double. On the CPU, where a launch costs nothing, the step is LibTorch's,
// so that CPU training stays bitwise what it was.
template <typename Base, typename Options, typename State, bool kDecoupled>
class Fused : public Base {
 public:
  using Base::Base;

  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) override {
    for (const auto& group : this->param_groups())
      for (const auto& p : group.params())
        if (!p.is_cuda()) return Base::step(std::move(closure));
    torch::Tensor loss;
    if (closure) {
      torch::AutoGradMode enable_grad(true);
      loss = closure();
    }
    torch::NoGradGuard no_grad;
    for (auto& group : this->param_groups()) {
      const auto& o = static_cast<const Options&>(group.options());
      struct Batch {
        std::vector<at::Tensor> params, grads, avgs, squares, max_squares;
      };
      std::map<int64_t, Batch> by_step;  // the kernel takes one step count per parameter: batched by it
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& slot = this->state()[p.unsafeGetTensorImpl()];
        if (!slot) {
          auto s = std::make_unique<State>();
          s->step(0);
          s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
          s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
          if (o.amsgrad()) s->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
          slot = std::move(s);
        }
        auto& s = static_cast<State&>(*slot);
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
        const auto [beta1, beta2] = o.betas();
        if constexpr (kDecoupled)
          at::_fused_adamw_(b.params, b.grads, b.avgs, b.squares, b.max_squares, steps, o.lr(), beta1, beta2,
                            o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
        else
          at::_fused_adam_(b.params, b.grads, b.avgs, b.squares, b.max_squares, steps, o.lr(), beta1, beta2,
                           o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
      }
    }
    return loss;
  }
};

using FusedAdam = Fused<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState, false>;
using FusedAdamW = Fused<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState, true>;

// One group per weight decay: the decayed parameters, then the exempt ones at 0.
template <typename Options>
std::vector<torch::optim::OptimizerParamGroup> groupsOf(const Options& defaults, std::vector<torch::Tensor> decayed,
                                                        std::vector<torch::Tensor> exempt) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decayed.empty() || exempt.empty()) groups.emplace_back(std::move(decayed), std::make_unique<Options>(defaults));
  if (!exempt.empty()) {
    auto options = std::make_unique<Options>(defaults);
    options->weight_decay(0);
    groups.emplace_back(std::move(exempt), std::move(options));
  }
  return groups;
}

template <typename State>
void putAdamState(std::map<std::string, torch::Tensor>& out, const std::string& family, const State& s) {
  out[family + ".step"] = torch::tensor(s.step(), torch::kLong);
  out[family + ".exp_avg"] = s.exp_avg();
  out[family + ".exp_avg_sq"] = s.exp_avg_sq();
  if (s.max_exp_avg_sq().defined()) out[family + ".max_exp_avg_sq"] = s.max_exp_avg_sq();
}

template <typename State>
std::unique_ptr<State> adamState(const std::map<std::string, torch::Tensor>& state, const std::string& family,
                                 const torch::Tensor& param) {
  auto s = std::make_unique<State>();
  s->step(required(state, family + ".step").template item<int64_t>());
  s->exp_avg(sameShape(state, family + ".exp_avg", param));
  s->exp_avg_sq(sameShape(state, family + ".exp_avg_sq", param));
  if (state.count(family + ".max_exp_avg_sq")) s->max_exp_avg_sq(sameShape(state, family + ".max_exp_avg_sq", param));
  return s;
}

}  // namespace

double stepRate(double scheduled, int64_t step, int t1_delay, int64_t t1_warmup_steps) {
  return scheduled * schedule::learningRateScale(t1_delay, step, t1_warmup_steps);
}

void setLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const recipe::OptimizerOptions& o, double lr,
                                                       std::vector<torch::Tensor> params,
                                                       const std::vector<std::string>& names) {
  recipe::checkOptimizer(o);
  const double decay = o.weightDecay();
  std::vector<torch::Tensor> decayed, exempt;
  const recipe::NoDecayRule rule(o.no_decay);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const bool free = decay > 0 && !rule.empty() && i < names.size() && rule.exempts(names[i], params[i].dim());
    (free ? exempt : decayed).push_back(params[i]);
  }
  if (o.name == "adam") {
    const auto options = torch::optim::AdamOptions(lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(decay);
    return std::make_unique<FusedAdam>(groupsOf(options, std::move(decayed), std::move(exempt)), options);
  }
  if (o.name == "adamw") {
    const auto options = torch::optim::AdamWOptions(lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(decay);
    return std::make_unique<FusedAdamW>(groupsOf(options, std::move(decayed), std::move(exempt)), options);
  }
  const auto options = torch::optim::SGDOptions(lr).momentum(o.momentum).nesterov(o.nesterov).weight_decay(decay);
  return std::make_unique<torch::optim::SGD>(groupsOf(options, std::move(decayed), std::move(exempt)), options);
}

std::map<std::string, torch::Tensor> optimizerState(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  std::map<std::string, torch::Tensor> out;
  auto it = optimizer.state().find(keyOf(param));
  if (it == optimizer.state().end()) return out;
  if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
    putAdamState(out, "adam", *adam);
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
    putAdamState(out, "adamw", *adamw);
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
  auto expect = [&](const std::string& mine) {
    if (family != mine) throw Error("optimizer state: saved by " + family + ", loaded into " + mine);
  };
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    expect("adam");
    optimizer.state()[key] = adamState<torch::optim::AdamParamState>(state, family, param);
  } else if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    expect("adamw");
    optimizer.state()[key] = adamState<torch::optim::AdamWParamState>(state, family, param);
  } else {
    expect("sgd");
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(sameShape(state, "sgd.momentum_buffer", param));
    optimizer.state()[key] = std::move(s);
  }
}

}  // namespace pipetrain::runtime
