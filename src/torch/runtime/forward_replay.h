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

#include "pipetrain/torch/models.h"

namespace pipetrain::runtime {

// A stage that recomputes only its first layers (StageLayers::recompute_layers): those,
// the others, and which of the first the others or later stages read (`sent`: the
// stage's layers whose outputs later stages receive).
struct PartRecomputed {
  std::vector<int> layers, rest, kept;
};
PartRecomputed partRecomputed(const models::Model& model, const std::vector<int>& stage_layers, int recomputed,
                              const std::vector<int>& sent);

// F of such a stage: its first layers without a graph, then the outputs of them that
// others read made leaves (appended to `kept` by layer, the roots the second backward
// call starts from), then the rest with its graph from there. The first layers' other
// outputs go now. Returns `values` as models::forwardLayers does.
std::map<std::string, torch::Tensor> forwardKeeping(const models::Model& model, const PartRecomputed& part,
                                                    std::map<std::string, torch::Tensor> values,
                                                    std::vector<std::pair<int, torch::Tensor>>& kept);

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
