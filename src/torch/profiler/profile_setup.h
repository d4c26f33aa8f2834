// The model made ready for profiling: the batch and labels a profile times on, the
// model kept as it was, and each layer set up on its real inputs (LayerRun), with what
// says which layers repeat another. profileModel times what this prepares, and the
// profile's cost is priced on it before profiling (profile_cost.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "layer_run.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/precision.h"

namespace pipetrain::profiler {

// The device the model's parameters are on (the CPU without any).
torch::Device deviceOf(const models::Model& model);

// Training mode for the duration of the profile, and the model as it was afterwards:
// each layer's mode, and its buffers (batch norm's running statistics move with every
// forward pass in training mode). Exceptions included.
class ModelStateGuard {
 public:
  explicit ModelStateGuard(const models::Model& model) : layers_(model.layers) {
    torch::NoGradGuard no_grad;
    for (const models::Layer& layer : layers_) {
      training_.push_back(layer.module.ptr()->is_training());
      for (const torch::Tensor& b : layer.module.ptr()->buffers()) buffers_.emplace_back(b, b.clone());
      layer.module.ptr()->train(true);
    }
  }
  ~ModelStateGuard() {
    torch::NoGradGuard no_grad;
    for (auto& [buffer, saved] : buffers_) buffer.copy_(saved);
    for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i].module.ptr()->train(training_[i]);
  }
  ModelStateGuard(const ModelStateGuard&) = delete;
  ModelStateGuard& operator=(const ModelStateGuard&) = delete;

 private:
  const std::vector<models::Layer>& layers_;
  std::vector<bool> training_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> buffers_;  // (buffer, its value before)
};

// A batch of `batch` typical inputs (NOTE(typical-input)), on the CPU.
torch::Tensor typicalInput(const models::InputSpec& input, int64_t batch);

// Labels of the kind the model's loss takes (models::lossOf), for `output`: uniform
// classes (or tokens) over the output's last dimension, or uniform targets for a
// regression; from the profile's own generator, as typicalInput.
torch::Tensor typicalLabels(const models::Model& model, const torch::Tensor& output);

// The first layer that reads the model input, or -1 (NOTE(input-loading)).
int firstInputReader(const models::Model& model);

// Every layer on its real inputs: the outputs of its producers' forward passes on a
// typical batch of `batch`, as leaves of the layer's own graph. An output is let go after
// its last reader has taken it.
struct PreparedLayers {
  std::vector<LayerRun> runs;
  std::vector<int64_t> output_bytes;    // per layer
  std::vector<std::string> signatures;  // per layer (NOTE(identical-layers))
  torch::Tensor labels;                 // typical labels of the model's output
};
PreparedLayers prepareLayers(const models::Model& model, int64_t batch, runtime::Precision precision,
                             const torch::Device& device);

// The layers share `share` of `shares` (plan::profileShares over the layers' parameter
// bytes) holds, [first, end), and which of them it times itself: with
// `time_identical_once`, a layer that repeats an earlier one of the share takes its
// times (NOTE(identical-layers)); the layer that loads the batch and the one that
// computes the loss are always timed as themselves. timed_layers[k] is the k-th timed
// layer, and layer l takes the times of timed_layers[slot[l]] (-1 outside the share).
struct ShareLayers {
  int first = 0, end = 0;
  std::vector<int> timed_layers;
  std::vector<int> slot;
};
ShareLayers shareLayers(const models::Model& model, const std::vector<std::string>& signatures, int share,
                        int shares, bool time_identical_once);

}  // namespace pipetrain::profiler
