// One layer of a model set up for measuring (LayerRun): its forward pass, its whole
// backward pass and a split schedule's I and W, as training runs them; and the memory
// one forward and backward pass of it holds. profileModel times and measures layers
// through it.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "../runtime/split_backward.h"
#include "pipetrain/torch/precision.h"
#include "pipetrain/torch/models.h"

namespace pipetrain::profiler {

// Timed work on a GPU is asynchronous: wait for it before reading the clock.
void synchronize(const torch::Device& device);

// One layer set up for timing: its inputs and what its backward pass differentiates.
struct LayerRun {
  const models::Model& model;
  int index;
  std::vector<torch::Tensor> inputs;  // in layerInputs order; each requires grad unless it is the model input
  std::vector<torch::Tensor> params;  // the layer's trainable parameters
  bool input_grad = false;            // whether any input requires grad (the layer has an I part)
  std::vector<torch::Tensor> grad_sums;  // per parameter: where the full backward accumulates
  runtime::Precision precision = runtime::Precision::kFp32;  // bf16: the forward pass under autocast, as training's

  torch::Tensor forward() const {  // merge included
    runtime::AutocastScope autocast(precision, device());
    return models::forwardLayer(model, index, inputs);
  }

  // The model's loss on `output` against `labels`, as the last stage computes it: under
  // the same autocast as its forward pass (NOTE(loss)).
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& labels) const {
    runtime::AutocastScope autocast(precision, device());
    return models::lossOf(model, output, labels);
  }

  torch::Device device() const { return params.empty() ? inputs.front().device() : params.front().device(); }

  // Gradients of `output` (seeded with `seed`) w.r.t. the inputs that require grad, then
  // the parameters. torch::autograd::grad returns the gradients instead of accumulating
  // them into .grad, so the model's gradients stay untouched.
  std::vector<torch::Tensor> backward(const torch::Tensor& output, const torch::Tensor& seed) const {
    std::vector<torch::Tensor> wrt;
    for (const torch::Tensor& input : inputs)
      if (input.requires_grad()) wrt.push_back(input);
    wrt.insert(wrt.end(), params.begin(), params.end());
    if (wrt.empty() || !output.requires_grad()) return {};
    return torch::autograd::grad({output}, wrt, {seed}, /*retain_graph=*/false, /*create_graph=*/false,
                                 /*allow_unused=*/true);
  }

  // A backward pass as training runs it: the parameters' gradients are added to a running
  // sum, as autograd adds them into .grad micro-batch after micro-batch; that is a read
  // and a write of every gradient (NOTE(pass-order)). The sums are the run's own, so the
  // model's .grad stays untouched.
  void backwardAccumulating(const torch::Tensor& output, const torch::Tensor& seed) {
    const std::vector<torch::Tensor> grads = backward(output, seed);
    if (!grads.empty()) addToSums(std::vector<torch::Tensor>(grads.end() - params.size(), grads.end()));
  }

  // A split schedule's I (NOTE(split-backward)): the inputs' gradients; `split` keeps what
  // W starts from.
  void inputBackward(runtime::SplitBackward& split, const torch::Tensor& output, const torch::Tensor& seed) const {
    if (output.requires_grad()) split.inputPass({output}, {seed}, inputs, params);
  }

  // Its W: the parameters' gradients from what I kept, added to the sums.
  void weightBackwardAccumulating(runtime::SplitBackward& split) { addToSums(split.weightGradients()); }

  void addToSums(const std::vector<torch::Tensor>& param_grads) {
    torch::NoGradGuard no_grad;
    for (std::size_t k = 0; k < params.size(); ++k) {
      const torch::Tensor& g = param_grads[k];
      if (!g.defined()) continue;
      if (!grad_sums[k].defined()) grad_sums[k] = torch::zeros_like(g);
      grad_sums[k].add_(g);
    }
  }
};

// Seconds `work` takes on `device`, from an idle device to an idle device.
template <class Work>
double secondsOf(const torch::Device& device, const Work& work) {
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  work();
  synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Memory {
  int64_t saved = -1;  // held after the forward pass: the output and what autograd keeps
  int64_t peak = -1;   // the most held at once during forward and backward
  int64_t split = -1;  // held after a split schedule's I, until W (NOTE(split-backward))
  int64_t split_peak = -1;  // the most held at once during the forward pass and that I
  int64_t weight_peak = -1;  // the most W then held at once above what I left
};

// One more forward and full backward, then a forward and a split I, then its W, each
// under a MemoryProbe. Counts only what the layer
// allocates (its inputs and parameters existed before), so a layer's figures do not
// include its inputs: they are its producers' outputs, counted there. The merge of
// several inputs is the layer's own allocation. `loss_labels`, given for the layer whose
// output is the model's, adds the loss to its forward pass and starts its backward pass
// there, as training does (NOTE(loss)): what the loss keeps for its backward (the fp32
// log-probabilities of every token under bf16) is the last stage's too.
Memory measureMemory(const LayerRun& run, const torch::Device& device, const torch::Tensor& loss_labels = {});

}  // namespace pipetrain::profiler
