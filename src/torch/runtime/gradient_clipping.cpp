#include "gradient_clipping.h"

namespace pipetrain::runtime {

torch::Tensor squaredNorm(const std::vector<torch::Tensor>& grads, double factor, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  torch::Tensor sum = torch::zeros({1}, torch::dtype(torch::kFloat).device(device));
  for (const torch::Tensor& g : grads)
    if (g.defined()) sum.add_(torch::linalg_vector_norm(g, 2, {}, false, torch::kFloat).square());
  if (factor != 1.0) sum.mul_(factor * factor);
  return sum;
}

torch::Tensor clipCoefficient(const torch::Tensor& squared_norm, double max_norm) {
  return (max_norm / (squared_norm.sqrt() + 1e-6)).clamp_max(1.0);
}

double clipGradients(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& counted,
                     double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : counted) grads.push_back(p.grad());
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  const torch::Tensor squared = squaredNorm(grads, 1.0, device);
  const torch::Tensor coefficient = clipCoefficient(squared, max_norm);
  torch::NoGradGuard no_grad;
  for (const auto& p : params)
    if (p.grad().defined()) p.grad().mul_(coefficient);
  return squared.sqrt().item<double>();
}

}  // namespace pipetrain::runtime
