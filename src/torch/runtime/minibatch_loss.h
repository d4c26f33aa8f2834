// A mini-batch's mean training loss over every micro-batch of it, as the executor
// reports it. A replicated last stage's replicas each sum the loss of their own
// micro-batches; the sums meet in one small all-reduce over the replica group, started
// when the mini-batch ends on the rank and read with the report, a mini-batch later, so
// that no replica waits for it (and a GPU is not synchronised with the host per step).
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/torch/transport.h"

namespace pipetrain::runtime {

class MinibatchLoss {
 public:
  // The loss of `minibatch` on a rank without the last stage: NaN.
  explicit MinibatchLoss(int minibatch) : minibatch_(minibatch) {}
  // On a rank that holds the last stage on `device`: `sum` of its micro-batches' losses
  // (undefined where it computed none) over `count` of them, summed with the other
  // replicas in `replicas` (the stage's ranks) where there are several.
  MinibatchLoss(int minibatch, const torch::Tensor& sum, int count, const torch::Device& device,
                const std::vector<int>& replicas, DataChannel& channel);

  int minibatch() const { return minibatch_; }
  double mean();  // waits for the replicas' sums where needed

 private:
  int minibatch_;
  torch::Tensor sum_and_count_;  // on the device, or undefined
  std::unique_ptr<PendingOp> op_;
};

}  // namespace pipetrain::runtime
