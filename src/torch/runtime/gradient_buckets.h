// Data-parallel gradients of one stage replica, reduced as PyTorch's DDP reduces them:
// the stage's gradients live in a few flat buckets (every parameter's .grad() is a view
// into one, so nothing is copied in or out), and during the backward pass that completes
// them each bucket is all-reduced as soon as its last gradient is final, in bucket order,
// while the rest of the backward pass still runs.
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/torch/transport.h"

namespace pipetrain::runtime {

class GradientBuckets {
 public:
  // Buckets of about `bucket_bytes`, filled from the last parameter backwards (the order
  // in which a backward pass finishes them). Sets the parameters' gradients to zeroed
  // views of the buckets.
  GradientBuckets(std::vector<torch::Tensor> params, std::vector<int> group, DataChannel& channel,
                  int64_t bucket_bytes);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // The next backward pass completes the gradients: reduce each bucket when it is final.
  void arm();
  // Starts what has not started (nothing was armed, or a parameter got no gradient) and
  // waits for every bucket: the gradients are then summed over the group.
  void finish();

  int numBuckets() const { return static_cast<int>(flat_.size()); }

 private:
  struct Hooked;  // what the autograd hooks reach; outlives this object if need be
  void gradientFinal(std::size_t param);
  void startReady();

  std::vector<torch::Tensor> params_;
  std::vector<int> group_;
  DataChannel& channel_;
  std::vector<torch::Tensor> flat_;          // per bucket
  std::vector<int> bucket_of_;               // per parameter
  std::vector<int> pending_;                 // per bucket: gradients not final yet
  std::vector<std::unique_ptr<PendingOp>> ops_;
  std::size_t next_ = 0;                     // the next bucket to start
  bool armed_ = false;
  std::shared_ptr<Hooked> hooked_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: they carry the hooks
};

}  // namespace pipetrain::runtime
