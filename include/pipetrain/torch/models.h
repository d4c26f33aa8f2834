// Models: the zoo's, and the user's own from a TorchScript file. Every model runs as a
// chain of named layers (a ResNet's residual blocks and a transformer's blocks are single
// layers; a TorchScript DAG carries the tensors its later layers still need across each
// layer), so a pipeline stage is simply a run of consecutive layers, and the model's
// LayerGraph has one node per layer.
//
// Building is deterministic: the same name, config and seed (or the same file) give
// bitwise-identical parameters in every process, which is how each rank builds only its
// stage and still matches single-process training exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/graph/layer_graph.h"

namespace torch::jit {
struct Module;
}

namespace pipetrain::models {

// What a model consumes and how its loss is taken.
// kTokens: int64 sequences with a label per position (a language model); kIndices: int64
// inputs with one class label per sample (e.g. a user's embedding-bag model).
enum class InputKind { kImage, kFeatures, kTokens, kIndices };
// Cross-entropy against int64 class labels; mean squared error against float targets
// (a user's regression data).
enum class LossKind { kCrossEntropy, kMeanSquaredError };

struct InputSpec {
  InputKind kind = InputKind::kImage;
  std::vector<int64_t> sample_shape;  // per sample, e.g. {1, 28, 28}, {784}, {context}
  int64_t num_classes = 10;           // classes, or the vocabulary for tokens; targets per sample for MSE
  LossKind loss = LossKind::kCrossEntropy;
};

struct Layer {
  std::string name;                   // "conv1", "block3", "head"
  std::string kind;                   // "conv", "linear", "residual", "transformer_block", ...
  torch::nn::AnyModule module;        // Tensor -> Tensor
};

// Copying a Model is shallow: the copy shares the layers' modules and parameters.
struct Model {
  std::string name;
  InputSpec input;
  std::vector<Layer> layers;          // in execution order
  // A model loaded from TorchScript: the file's module, whose parameters and buffers the
  // layers share (so saving it saves the trained weights). Null for the zoo's models.
  std::shared_ptr<torch::jit::Module> script;

  // One node per layer, chain edges, parameter bytes (fp32) and output bytes per sample
  // measured by a dry forward pass of one sample (batch_size 1, eval mode, no grad; the
  // layers' modes, buffers and the global generator are left as they were). Times are a
  // rough estimate from that pass (backward parts = one forward each) until profiled.
  graph::LayerGraph layerGraph() const;
  // Parameters of layers [first, last) in order.
  std::vector<torch::Tensor> parameters(int first, int last) const;
};

// Integer options with defaults per model ("layers", "width", "heads", "context",
// "channels", "image_size", "hidden", "classes", ...). Unknown keys are an Error
// listing the known ones.
using ModelConfig = std::map<std::string, int64_t>;

// Known names: fmnist-cnn, mlp, vgg16, resnet50, gpt.
const std::vector<std::string>& modelNames();
Model buildModel(const std::string& name, const ModelConfig& config = {}, uint64_t seed = 0);

// The user's model: a TorchScript module saved from Python (torch.jit.script or trace).
// Its top-level children are the layers, run in the order they were registered: a
// scripted nn.Sequential, or any module whose forward calls its children in order. A
// module with an attribute `pipetrain_inputs: Dict[str, List[str]]` naming each child's
// inputs ("input" is the model's input) is a DAG of layers; its children's order must be
// topological, and the last child's output is the model's. The load runs the module
// both whole and layer by layer on one sample of `input` and refuses it, naming the
// file and the first layer at fault, unless the two agree and the output fits the loss.
Model loadScriptedModel(const std::string& path, const InputSpec& input);
// Writes `model` (from loadScriptedModel) back as a TorchScript file with its current
// weights, loadable in Python by torch.jit.load.
void saveScriptedModel(const Model& model, const std::string& path);

// Runs layers [first, last) on `input` (the stage forward pass).
torch::Tensor forwardRange(const Model& model, int first, int last, torch::Tensor input);

// The model's loss, a mean: cross-entropy over classes ((N, C) vs (N)) or over every
// position ((N, T, V) vs (N, T)); or the squared error over every target (MSE).
torch::Tensor lossOf(const Model& model, const torch::Tensor& output, const torch::Tensor& labels);
// Correct predictions in a batch (positions, for sequences); 0 under MSE, which has none.
int64_t correctPredictions(const Model& model, const torch::Tensor& output, const torch::Tensor& labels);

// Byte counting shared by layerGraph() and the profiler (include/pipetrain/torch/profiler.h).
// Bytes of a tensor's elements at its dtype.
int64_t tensorBytes(const torch::Tensor& tensor);
// Bytes of a layer's parameters at their dtype (4 x numel for the zoo's fp32 models).
int64_t parameterBytes(const Layer& layer);

// A batch of `batch` samples with constant values (zeros for tokens, int64; 0.5
// otherwise, fp32) on the CPU. Dry runs and profiles use it so that they never draw
// from the global generator.
torch::Tensor constantInput(const InputSpec& input, int64_t batch);

}  // namespace pipetrain::models
