#include "stage_state.h"

#include <algorithm>
#include <cstring>

#include "optimizer_state.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

// Exchanges the contents of two tensors of one shape through their `.data()` views,
// which autograd's version counters do not see: a backward pass then reads whatever
// the parameters' storage holds when it runs. On the CPU the bytes go through a buffer
// that stays in the core's cache, a block at a time, with memcpy: many times faster than
// std::swap_ranges, byte by byte (measured: docs/async.md, "How the executor keeps
// versions"), and every pass that reads a stashed version swaps twice.
void swapContents(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor x = a.data(), y = b.data();
  if (x.device().is_cpu() && x.is_contiguous() && y.is_contiguous() && x.dtype() == y.dtype()) {
    constexpr std::size_t kBlock = 64 << 10;
    static thread_local std::vector<char> buffer(kBlock);
    auto *p = static_cast<char*>(x.data_ptr()), *q = static_cast<char*>(y.data_ptr());
    for (std::size_t done = 0, n = x.nbytes(); done < n; done += kBlock) {
      const std::size_t k = std::min(kBlock, n - done);
      std::memcpy(buffer.data(), p + done, k);
      std::memcpy(p + done, q + done, k);
      std::memcpy(q + done, buffer.data(), k);
    }
    return;
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor t = x.clone();
  x.copy_(y);
  y.copy_(t);
}

}  // namespace

std::vector<torch::Tensor> stashCopy(const std::vector<torch::Tensor>& weights) {
  std::vector<torch::Tensor> out;
  for (const auto& t : weights) out.push_back(t.detach().clone());
  return out;
}

void swapVersions(const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& other) {
  for (std::size_t i = 0; i < other.size(); ++i) swapContents(weights[i], other[i]);
}

void correctWeights(const std::vector<torch::Tensor>& out, const std::vector<torch::Tensor>& weights,
                    const std::vector<torch::Tensor>& velocity, int steps) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < out.size(); ++i) {
    torch::Tensor o = out[i];
    torch::sub_out(o, weights[i].data(), velocity[i], steps);
  }
}

void withVersion(StageState& st, int version, int t2_steps, const std::function<std::string()>& what,
                 const std::function<void()>& compute) {
  std::vector<torch::Tensor>* swapped = nullptr;
  if (version != st.version) {
    auto it = st.stash.find(version);
    if (it == st.stash.end())
      throw Error(what() + " reads weight version " + std::to_string(version) + ", which is neither current (v" +
                  std::to_string(st.version) + ") nor stashed");
    swapped = &it->second;
  } else if (t2_steps > 0) {
    auto& u = st.corrected;
    if (u.empty()) u = stashCopy(st.params);
    correctWeights(u, st.params, st.velocity, t2_steps);
    swapped = &u;
  }
  if (swapped) swapVersions(st.params, *swapped);
  compute();
  if (swapped) swapVersions(st.params, *swapped);
}

void stepStage(StageState& st, int new_version, const StepOptions& o) {
  torch::NoGradGuard no_grad;
  if (o.stash_old) {
    st.stash[st.version] = stashCopy(st.params);
    st.peak_versions = std::max(st.peak_versions, 1 + static_cast<int>(st.stash.size()));
  }
  auto& opt = *st.optimizer;
  if (o.lr) setLearningRate(opt, *o.lr);
  const bool correct = o.t2_decay.has_value();
  const double gamma = o.t2_decay.value_or(0.0);
  auto& delta = st.velocity;
  if (correct && delta.empty())
    for (const auto& p : st.params) delta.push_back(torch::zeros_like(p.detach()));
  for (std::size_t i = 0; i < st.params.size(); ++i) {
    torch::Tensor g = st.params[i].grad();
    if (g.defined() && o.gradient_factor != 1.0) g.mul_(o.gradient_factor);
    if (g.defined() && o.clip.defined()) g.mul_(o.clip);
    st.aliases[i].mutable_grad() = g;
    if (correct) delta[i].mul_(gamma).sub_(st.params[i].data(), 1 - gamma);  // - (1 - gamma) w_t
  }
  opt.step();
  for (std::size_t i = 0; i < st.params.size(); ++i) {
    if (correct) delta[i].add_(st.params[i].data(), 1 - gamma);  // + (1 - gamma) w_{t+1}
    // Cleared, not zeroed, where no bucket owns the storage: the next backward pass
    // writes the gradient instead of adding it to zeros (a kernel less per parameter).
    if (st.params[i].grad().defined()) {
      if (st.buckets) st.params[i].mutable_grad().zero_();
      else st.params[i].mutable_grad().reset();
    }
    st.aliases[i].mutable_grad().reset();
  }
  st.version = new_version;
  ++st.steps_taken;
}

// T2's velocity by name, beside the optimizer's state.
constexpr const char* kVelocity = "t2.velocity";

std::vector<ParameterState> parameterStateOf(const StageState& st) {
  std::vector<ParameterState> out;
  for (std::size_t i = 0; i < st.aliases.size(); ++i) {
    ParameterState state = optimizerState(*st.optimizer, st.aliases[i]);
    if (!st.velocity.empty()) state[kVelocity] = st.velocity[i];
    out.push_back(std::move(state));
  }
  return out;
}

void loadParameterState(StageState& st, int s, const std::vector<ParameterState>& state) {
  const auto& params = st.aliases;
  if (state.size() != params.size())
    throw Error("stage " + std::to_string(s) + ": state for " + std::to_string(state.size()) + " parameters, the stage has " +
                std::to_string(params.size()));
  auto& velocity = st.velocity;
  velocity.clear();
  for (std::size_t i = 0; i < params.size(); ++i) {
    ParameterState optimizer = state[i];
    auto v = optimizer.find(kVelocity);
    if (v != optimizer.end()) {
      if (v->second.sizes() != params[i].sizes())
        throw Error("stage " + std::to_string(s) + ": T2's velocity has another shape than its parameter");
      velocity.push_back(v->second.detach().to(params[i].device(), /*non_blocking=*/false, /*copy=*/true));
      optimizer.erase(v);
    }
    setOptimizerState(*st.optimizer, params[i], optimizer);
  }
  // All or nothing: T2 starts its velocity at zero for every parameter or none.
  if (!velocity.empty() && velocity.size() != params.size())
    throw Error("stage " + std::to_string(s) + ": T2's velocity for some of its parameters only");
}

}  // namespace pipetrain::runtime
