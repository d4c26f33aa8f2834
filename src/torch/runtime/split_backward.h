// A backward pass in zero bubble's two halves: I, what the gradients of a stage's inputs
// need, and W, the parameters' gradients, run later.
//
// NOTE(split-backward): I runs the backward graph from the roots down to the targets (the
// stage's inputs) only. Where a parameter's gradient branches off that path (a linear's
// matmul, a layer norm), I keeps the gradient arriving at that operation. W starts from
// the kept gradients and runs only the branches to the parameters: a transformer block's
// W is its weight products, not its attention backward again. The operations where the
// branches start are found by walking the autograd graph after the forward pass, as
// PyTorch's pipelining does for its zero-bubble schedules (stage_backward_weight).
//
// Each group of parameters that share branches is one engine call in W. A group whose
// branch operation also feeds, through I's path, an operation of the same group's
// parameters (a weight used twice along one path) cannot start at the kept gradients
// without counting a part twice; such parameters take their gradients in W from the
// roots instead, running I's path again for them alone.
#pragma once

#include <vector>

#include <torch/csrc/autograd/edge.h>
#include <torch/torch.h>

namespace pipetrain::runtime {

class SplitBackward {
 public:
  // I, from `roots` seeded with `root_grads`: returns the gradients of `targets` in
  // their order (undefined where no path reaches one, or the target needs none), and
  // keeps what W needs for `params`. The graph is kept for W.
  std::vector<torch::Tensor> inputPass(const std::vector<torch::Tensor>& roots,
                                       const std::vector<torch::Tensor>& root_grads,
                                       const std::vector<torch::Tensor>& targets,
                                       const std::vector<torch::Tensor>& params);

  // W: adds each parameter's gradient into its .grad, as a backward pass would.
  void weightPass();

  // W, returning the gradients in the order of inputPass's `params` instead (undefined
  // where a parameter has none); .grad stays untouched.
  std::vector<torch::Tensor> weightGradients();

  // Parameters whose gradients W takes from the roots (NOTE(split-backward)).
  std::size_t parametersFromRoots() const;

 private:
  struct Call {  // one engine call of W
    std::vector<torch::autograd::Edge> starts;  // where it starts: kept gradients' slots, or the roots
    std::vector<torch::Tensor> grads;           // arriving there
    std::vector<torch::autograd::Edge> params;  // the parameters' accumulators
    std::vector<std::size_t> param_index;       // the same, as indices into inputPass's `params`
    bool from_roots = false;
  };
  std::vector<Call> calls_;
  std::size_t param_count_ = 0;

  std::vector<torch::Tensor> run(bool accumulate);
};

}  // namespace pipetrain::runtime
