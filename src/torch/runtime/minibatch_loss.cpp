#include "minibatch_loss.h"

#include <cmath>

namespace pipetrain::runtime {

MinibatchLoss::MinibatchLoss(int minibatch, const torch::Tensor& sum, int count, const torch::Device& device,
                             const std::vector<int>& replicas, DataChannel& channel)
    : minibatch_(minibatch) {
  const auto options = torch::dtype(torch::kDouble).device(device);
  sum_and_count_ = torch::stack({sum.defined() ? sum.to(options) : torch::zeros({}, options),
                                 torch::full({}, static_cast<double>(count), options)});
  if (replicas.size() > 1) op_ = channel.startAllReduceSum(sum_and_count_, replicas);
}

double MinibatchLoss::mean() {
  if (!sum_and_count_.defined()) return std::nan("");
  if (op_) op_->wait();
  const torch::Tensor host = sum_and_count_.cpu();
  return host[0].item<double>() / host[1].item<double>();
}

}  // namespace pipetrain::runtime
