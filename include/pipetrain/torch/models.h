// Models: the zoo's, and the user's own from a TorchScript file. A model is a DAG of
// named layers run in a topological order: each layer reads the outputs of earlier
// layers (or the model's input), merges them into one tensor and runs its module on it.
// Chains, where every layer reads its predecessor, need no wiring at all, and most
// models are chains (a ResNet's residual blocks and a transformer's blocks are single
// layers; a TorchScript DAG is packed into a chain, each layer carrying the tensors its
// later layers still need). The model's LayerGraph has one node per layer and its edges.
//
// Building is deterministic: the same name, config and seed (or the same file) give
// bitwise-identical parameters in every process, which is how each rank builds only its
// stage and still matches single-process training exactly.
#pragma once

#include <cstdint>
#include <functional>
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
// inputs with one class label per sample (multimodal, or a user's embedding-bag model).
enum class InputKind { kImage, kFeatures, kTokens, kIndices };
// Cross-entropy against int64 class labels; mean squared error against float targets
// (a user's regression data).
enum class LossKind { kCrossEntropy, kMeanSquaredError };

// One of several inputs a sample has, by name (a Hugging Face encoder's `input_ids` and
// `attention_mask`), matched to the arguments of the model's forward() by that name.
struct NamedInput {
  std::string name;
  std::vector<int64_t> sample_shape;
  bool integer = false;  // int64 values (ids, masks), else fp32
  int64_t range = 0;     // integer: the values lie in [0, range) (the largest + 1)
};

struct InputSpec {
  InputKind kind = InputKind::kImage;
  std::vector<int64_t> sample_shape;  // per sample, e.g. {1, 28, 28}, {784}, {context}
  int64_t num_classes = 10;           // classes, or the vocabulary for tokens; targets per sample for MSE
  LossKind loss = LossKind::kCrossEntropy;
  int64_t vocab = 0;                  // kIndices: inputs lie in [0, vocab) (0 = unknown)
  // kTokens: the positions labelled per sample where they differ from the input's length
  // (an encoder-decoder's target, read by the decoder as a named input); 0: as many.
  int64_t label_positions = 0;
  // Several inputs per sample, in the data file's order (empty: one). The model's input
  // is then their pack (packInputs), and `kind` and `sample_shape` are the first's.
  std::vector<NamedInput> named;
};

// The name by which a layer reads the model's input; no layer may take it.
inline constexpr const char* kModelInput = "input";

// How a layer with several inputs makes the one tensor its module takes.
enum class Merge {
  kConcat,  // along dim 1 (features, channels): a fusion of branches
  kSum,     // element-wise, same shapes: a residual join
  kPack,    // each flattened to (N, numel) fp32 and concatenated: the module splits them again
};

struct Layer {
  std::string name;                   // "conv1", "block3", "head"
  std::string kind;                   // "conv", "linear", "residual", "transformer_block", ...
  torch::nn::AnyModule module;        // Tensor -> Tensor: the merged inputs -> the output
  // The producers it reads: earlier layers' names, or kModelInput, which every stage
  // holding such a layer reads from the data itself (never a message). Empty = the
  // previous layer's output (the model input for the first layer), so a chain needs no
  // wiring. The last two fields have defaults so that Layer{name, kind, module} still
  // builds a chain's layer.
  std::vector<std::string> inputs = {};
  Merge merge = Merge::kConcat;       // used only with several inputs
};

// One weight that several layers share, as GPT-2 shares its input and output embeddings.
// Each holder keeps its own copy (a stage on another rank could not share the tensor
// anyway), and the copies stay equal because every holder steps with the same gradient:
// the sum of all the holders' gradients (sumTiedGradients in one process; across stages,
// runtime/tied_gradients.h), which is the gradient of the one shared weight.
struct TiedWeight {
  struct Holder {
    int layer;         // index into Model::layers
    std::string name;  // the parameter's name in that layer's module
  };
  std::vector<Holder> holders;  // by layer, at least two
};

// Copying a Model is shallow: the copy shares the layers' modules and parameters.
struct Model {
  std::string name;
  InputSpec input;
  std::vector<Layer> layers;          // in execution order, a topological one; the last is the output
  // A model loaded from TorchScript: the file's module, whose parameters and buffers the
  // layers share (so saving it saves the trained weights). Null for the zoo's models.
  std::shared_ptr<torch::jit::Module> script;
  std::vector<TiedWeight> tied;       // weights shared between layers (from a TorchScript file)
  // Where the parameters and buffers live (moveTo); inputs and messages go there too.
  torch::Device device = torch::kCPU;

  // One node per layer with the model's edges (graphInputs), parameter bytes (fp32) and
  // output bytes per sample measured by a dry forward pass of one sample through the DAG
  // (batch_size 1, eval mode, no grad; the layers' modes, buffers and the global
  // generator are left as they were). Times are a rough estimate from that pass
  // (backward parts = one forward each) until profiled. Throws what checkWiring throws.
  graph::LayerGraph layerGraph() const;
  // Parameters of layers [first, last) in order.
  std::vector<torch::Tensor> parameters(int first, int last) const;
  // Parameters of the given layers (indices), in that order.
  std::vector<torch::Tensor> parameters(const std::vector<int>& layers) const;
};

// The names of Model::parameters(layers), in its order: the user's state_dict names where
// the model's TorchScript file maps them (`pipetrain_state_dict`, written by the capture;
// a tied weight's first name), else "<layer>.<parameter>".
std::vector<std::string> parameterNames(const Model& model, const std::vector<int>& layers);

// The parameter a tied weight's holder holds. Throws Error when the layer has none so named.
torch::Tensor heldParameter(const Model& model, const TiedWeight::Holder& holder);
// Gives every holder of each tied weight the sum of the holders' gradients (an undefined
// gradient counts as zero): the one-process form of what the runtime does across stages.
void sumTiedGradients(const Model& model);
// Every tied weight's copies but its first holder's: after sumTiedGradients they hold the
// first's gradient, which a gradient norm counts once.
std::vector<torch::Tensor> laterTiedCopies(const Model& model);
// "'transformer_wte' and 'lm_head'": the layers sharing `weight`, for messages.
std::string describeHolders(const Model& model, const TiedWeight& weight);
// The layers that keep batch norm's running statistics. Batch norm normalises over the
// samples a pass is given: in a pipeline, or on a replica, that is a micro-batch, not the
// mini-batch one process would normalise over.
std::vector<std::string> batchNormLayers(const Model& model);

// Integer options with defaults per model ("layers", "width", "heads", "context",
// "channels", "image_size", "hidden", "classes", ...). Unknown keys are an Error
// listing the known ones.
using ModelConfig = std::map<std::string, int64_t>;

// Moves every layer's parameters and buffers (and the TorchScript module's, which they
// share) to `device`, in place: tensors taken from the model before stay valid.
void moveTo(Model& model, const torch::Device& device);

// Known names: fmnist-cnn, mlp, vgg16, resnet50, gpt (chains); multimodal, dlrm,
// candle-uno, fmnist-branch (DAGs). Every built model passes checkWiring.
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
// `name`: what the user calls the model where that is not the file's stem (one captured
// from Python into the cache): its refusals then name it so, beside the file.
Model loadScriptedModel(const std::string& path, const InputSpec& input, const std::string& name = "");
// Writes `model` (from loadScriptedModel) back as a TorchScript file with its current
// weights, loadable in Python by torch.jit.load.
void saveScriptedModel(const Model& model, const std::string& path);
// The name a layer of a TorchScript model gives the tensor at `path_in_child` inside its
// child, as its parameters, the optimizer and checkpoints know it: "0.conv1.weight" in
// child "layer1" is layer1's "0_conv1_weight" (registered names hold no dots).
std::string scriptedTensorName(std::string path_in_child);

// ===== Wiring and forward passes =====================================================

// The names `layer` reads, its empty `inputs` resolved: the previous layer's name, or
// kModelInput for the first layer. Throws Error for an index outside the model.
std::vector<std::string> layerInputs(const Model& model, int layer);
// layerInputs as graph::Layer::inputs says it: the layers it reads, without the model
// input, which is no edge (a layer reading only the model input has an empty list).
// Shared by layerGraph() and the profiler so that both record the same edges.
std::vector<std::string> graphInputs(const Model& model, int layer);
// Whether every layer reads only its predecessor (the first, the model input): then a
// stage is a run of consecutive layers and forwardRange runs it.
bool isChain(const Model& model);
// Throws an Error naming the model and the layer at fault unless the model is a DAG
// whose order is topological with one output: at least one layer; names non-empty,
// unique and not kModelInput; every input names kModelInput or an earlier layer,
// none twice; and every layer but the last is read by a later one (an unread
// branch would train nothing, and the loss is taken of the last layer's output).
// buildModel, forwardModel and layerGraph() call it.
void checkWiring(const Model& model);

// For each value a layer reads (a layer's name or kModelInput), the index of the last
// layer reading it: where a forward pass may let go of it. The last layer's output is
// read by no layer and absent.
std::map<std::string, int> lastReaders(const Model& model);
// The tensors `layer` reads, in layerInputs order, looked up in `values` (a producer's
// name or kModelInput -> its output). Throws Error naming the layer and the missing input.
std::vector<torch::Tensor> gatherInputs(const Model& model, int layer,
                                        const std::map<std::string, torch::Tensor>& values);
// Runs one layer on its inputs, given in layerInputs order: merges them (Merge) and runs
// the module. Throws Error naming the layer and the shapes when they do not merge, or
// when the count is not the layer's.
torch::Tensor forwardLayer(const Model& model, int layer, const std::vector<torch::Tensor>& inputs);
// Runs `layers` (indices, strictly increasing: a topological order) reading their inputs
// from `values` (a producer layer's name or kModelInput -> its output) and from outputs
// computed earlier in the same call. Returns `values` with every computed output added
// under its layer's name. This is a pipeline stage's forward pass for any set of layers
// whose inputs from outside the set are given. Throws Error naming the layer and the
// input when an input is neither given nor computed, and for bad indices.
std::map<std::string, torch::Tensor> forwardLayers(const Model& model, const std::vector<int>& layers,
                                                   std::map<std::string, torch::Tensor> values);
// The whole model on `input`: the last layer's output. Each intermediate output is let
// go once its last reader has run, after `on_output` (if given) has seen it with its
// layer's index. Throws what checkWiring throws.
torch::Tensor forwardModel(const Model& model, torch::Tensor input,
                           const std::function<void(int, const torch::Tensor&)>& on_output = {});
// Runs layers [first, last) of a chain on `input` (a chain stage's forward pass).
// Throws Error if the model is not a chain (use forwardLayers) or the range is bad.
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

// Eval mode for a dry run: batch norm in training mode would update its running
// statistics (a side effect of merely looking at the model) and refuses a batch of one
// at 1x1 resolution, and dropout would draw from the random stream. Restores each
// layer's mode on exit, exceptions included.
class EvalScope {
 public:
  explicit EvalScope(const std::vector<Layer>& layers);
  ~EvalScope();
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  const std::vector<Layer>& layers_;
  std::vector<bool> training_;
};

// A batch of `batch` samples with constant values (zeros for tokens, int64; 0.5
// otherwise, fp32; per named input alike, packed) on the CPU. Dry runs and profiles use
// it so that they never draw from the global generator.
torch::Tensor constantInput(const InputSpec& input, int64_t batch);

// Named inputs (InputSpec::named) travel as one tensor, the model's input: each
// flattened per sample and converted to fp32, concatenated in the spec's order, (N,
// total). Integers are exact in fp32 below 2^24, which the data file's reader checks
// (kLargestPackedInteger); a model from a file splits the pack again (scripted.cpp).
inline constexpr int64_t kLargestPackedInteger = int64_t{1} << 24;
torch::Tensor packInputs(const InputSpec& input, const std::vector<torch::Tensor>& parts);
// Batch-first tensors as one (N, total) fp32 tensor: each flattened per sample and
// converted, in order (packInputs, Merge::kPack, what a cut carries).
torch::Tensor flatPack(const std::vector<torch::Tensor>& tensors);

}  // namespace pipetrain::models
