// What a recomputing stage (StageLayers::recompute) keeps of a micro-batch between its
// forward pass, run without a graph, and the second forward pass that builds the graph
// just before the backward pass needs it: the pass's inputs and labels, and the random
// stream's state when F ran.
//
// The second pass must compute what the first one did, or the gradients would be of
// another function than the loss: dropout draws the same masks (the generator is set
// back to F's state for the pass and then returned to where it was, so later passes
// draw what they would have drawn without recomputation), and batch norm's running
// statistics, which F already updated, are put back as they were before the second
// pass. torch.utils.checkpoint does the same for the generator (preserve_rng_state).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace pipetrain::runtime {

class ForwardReplay {
 public:
  // At F, before the pass: `inputs` by producer name (as models::forwardLayers takes
  // them), the last stage's labels (else undefined), and the generator of `device`.
  ForwardReplay(torch::Device device, std::map<std::string, torch::Tensor> inputs, torch::Tensor labels);

  // Runs `forward` as F ran: on F's random stream, leaving `buffers` (the stage's
  // layers') and the generator as they were before the call.
  void run(const std::vector<torch::Tensor>& buffers, const std::function<void()>& forward) const;

  const std::map<std::string, torch::Tensor>& inputs() const { return inputs_; }
  const torch::Tensor& labels() const { return labels_; }

 private:
  torch::Device device_;
  std::map<std::string, torch::Tensor> inputs_;
  torch::Tensor labels_;
  torch::Tensor generator_state_;
};

}  // namespace pipetrain::runtime
