// Clipping by gradient norm, in torch.nn.utils.clip_grad_norm_'s arithmetic: every
// gradient times min(1, max_norm / (norm + 1e-6)), the coefficient kept on the
// gradients' device (reading it would make the host wait for the device). Where the
// norm is taken over which gradients is the caller's: the executor's whole-model and
// per-stage rules (executor.h, StepRecipe), the single-process references' whole model.
#pragma once

#include <vector>

#include <torch/torch.h>

namespace pipetrain::runtime {

// The sum of the squares of the defined gradients' elements, times factor^2, as a
// one-element fp32 tensor on `device` (each gradient's 2-norm first, as
// clip_grad_norm_ takes them, so the sum is of per-tensor norms squared).
torch::Tensor squaredNorm(const std::vector<torch::Tensor>& grads, double factor, const torch::Device& device);

// min(1, max_norm / (sqrt(squared_norm) + 1e-6)).
torch::Tensor clipCoefficient(const torch::Tensor& squared_norm, double max_norm);

// A single process's clipping of `params` (gradients as they will be applied), those of
// `counted` making the norm (a tied weight's copies once): what the references do. The
// norm, on the CPU.
double clipGradients(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& counted,
                     double max_norm);

}  // namespace pipetrain::runtime
