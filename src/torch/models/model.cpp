// What every model shares: running a chain's range of layers, the loss, parameters, and
// the LayerGraph the planner consumes. The wiring of a DAG's layers is in wiring.cpp.
#include <algorithm>
#include <chrono>
#include <map>

#include "pipetrain/util/error.h"
#include "zoo.h"

namespace pipetrain::models {
namespace {

void checkRange(const Model& model, int first, int last) {
  const int n = static_cast<int>(model.layers.size());
  if (first < 0 || first > last || last > n) {
    throw Error("model '" + model.name + "': layer range [" + std::to_string(first) + ", " +
                std::to_string(last) + ") is not within [0, " + std::to_string(n) + ")");
  }
}

}  // namespace

EvalScope::EvalScope(const std::vector<Layer>& layers) : layers_(layers) {
  for (const Layer& layer : layers_) {
    training_.push_back(layer.module.ptr()->is_training());
    layer.module.ptr()->eval();
  }
}

EvalScope::~EvalScope() {
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i].module.ptr()->train(training_[i]);
}

int64_t tensorBytes(const torch::Tensor& tensor) {
  return tensor.numel() * static_cast<int64_t>(tensor.element_size());
}

int64_t parameterBytes(const Layer& layer) {
  int64_t bytes = 0;
  for (const torch::Tensor& p : layer.module.ptr()->parameters()) bytes += tensorBytes(p);
  return bytes;
}

torch::Tensor constantInput(const InputSpec& input, int64_t batch) {
  if (!input.named.empty()) {
    std::vector<torch::Tensor> parts;
    for (const NamedInput& part : input.named) {
      std::vector<int64_t> shape = {batch};
      shape.insert(shape.end(), part.sample_shape.begin(), part.sample_shape.end());
      parts.push_back(part.integer ? torch::zeros(shape, torch::kLong) : torch::full(shape, 0.5f));
    }
    return packInputs(input, parts);
  }
  std::vector<int64_t> shape = {batch};
  shape.insert(shape.end(), input.sample_shape.begin(), input.sample_shape.end());
  if (input.kind == InputKind::kTokens || input.kind == InputKind::kIndices) return torch::zeros(shape, torch::kLong);
  return torch::full(shape, 0.5f);
}

torch::Tensor packInputs(const InputSpec& input, const std::vector<torch::Tensor>& parts) {
  if (parts.size() != input.named.size())
    throw Error("packInputs: " + std::to_string(parts.size()) + " tensors for " + std::to_string(input.named.size()) +
                " named inputs");
  return flatPack(parts);
}

torch::Tensor flatPack(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& t : tensors) flat.push_back(t.reshape({t.size(0), -1}).to(torch::kFloat));
  return torch::cat(flat, 1);
}

torch::Tensor forwardRange(const Model& model, int first, int last, torch::Tensor input) {
  if (!isChain(model))
    throw Error("model '" + model.name + "' is a graph of layers; run it with forwardLayers (or forwardModel)");
  checkRange(model, first, last);
  for (int i = first; i < last; ++i) input = forwardLayer(model, i, {std::move(input)});
  return input;
}

torch::Tensor lossOf(const Model& model, const torch::Tensor& output, const torch::Tensor& labels) {
  namespace F = torch::nn::functional;
  if (model.input.loss == LossKind::kMeanSquaredError) {
    if (output.numel() != labels.numel() || output.size(0) != labels.size(0)) {
      throw Error("model '" + model.name + "': lossOf wants an output of the targets' shape " +
                  c10::str(labels.sizes()) + ", got " + c10::str(output.sizes()));
    }
    return F::mse_loss(output, labels.reshape(output.sizes()));
  }
  if (model.input.kind == InputKind::kTokens) {
    if (output.dim() != 3 || labels.sizes() != output.sizes().slice(0, 2)) {
      throw Error("model '" + model.name + "': lossOf wants output (N, T, V) and labels (N, T)");
    }
    const int64_t vocab = output.size(2);
    return F::cross_entropy(output.reshape({-1, vocab}), labels.reshape({-1}));  // (N*T, V) vs (N*T)
  }
  if (output.dim() != 2 || labels.dim() != 1 || labels.size(0) != output.size(0)) {
    throw Error("model '" + model.name + "': lossOf wants output (N, C) and labels (N), got " +
                c10::str(output.sizes()) + " and " + c10::str(labels.sizes()));
  }
  return F::cross_entropy(output, labels);
}

int64_t correctPredictions(const Model& model, const torch::Tensor& output, const torch::Tensor& labels) {
  if (model.input.loss == LossKind::kMeanSquaredError) return 0;
  return output.argmax(-1).eq(labels).sum().item<int64_t>();
}

void moveTo(Model& model, const torch::Device& device) {
  if (model.device == device) return;
  // Module::to changes each tensor's data in place (set_data), so the layers and the
  // script keep sharing them.
  if (model.script) model.script->to(device);
  for (Layer& layer : model.layers) layer.module.ptr()->to(device);
  model.device = device;
}

std::vector<torch::Tensor> Model::parameters(int first, int last) const {
  checkRange(*this, first, last);
  std::vector<torch::Tensor> out;
  for (int i = first; i < last; ++i) {
    for (const torch::Tensor& p : layers[i].module.ptr()->parameters()) out.push_back(p);
  }
  return out;
}

std::vector<torch::Tensor> Model::parameters(const std::vector<int>& indices) const {
  std::vector<torch::Tensor> out;
  for (int l : indices) {
    checkRange(*this, l, l + 1);
    for (const torch::Tensor& p : layers[l].module.ptr()->parameters()) out.push_back(p);
  }
  return out;
}

std::vector<std::string> parameterNames(const Model& model, const std::vector<int>& layers) {
  std::map<const void*, std::string> user;  // by TensorImpl
  constexpr const char* kUserNames = "pipetrain_state_dict";
  if (model.script && model.script->hasattr(kUserNames) && model.script->attr(kUserNames).isGenericDict()) {
    std::map<std::string, std::string> by_key;
    for (const auto& entry : model.script->attr(kUserNames).toGenericDict())
      if (entry.key().isString() && entry.value().isString()) {
        const std::string names = entry.value().toStringRef();
        by_key[entry.key().toStringRef()] = names.substr(0, names.find(','));
      }
    for (const auto& p : model.script->named_parameters(/*recurse=*/true))
      if (auto it = by_key.find(p.name); it != by_key.end()) user[p.value.unsafeGetTensorImpl()] = it->second;
  }
  std::vector<std::string> out;
  for (int l : layers) {
    checkRange(model, l, l + 1);
    for (const auto& p : model.layers[l].module.ptr()->named_parameters()) {
      auto it = user.find(p.value().unsafeGetTensorImpl());
      out.push_back(it != user.end() ? it->second : model.layers[l].name + "." + p.key());
    }
  }
  return out;
}

torch::Tensor heldParameter(const Model& model, const TiedWeight::Holder& holder) {
  checkRange(model, holder.layer, holder.layer + 1);
  for (const auto& p : model.layers[holder.layer].module.ptr()->named_parameters())
    if (p.key() == holder.name) return p.value();
  throw Error("model '" + model.name + "': layer '" + model.layers[holder.layer].name + "' has no parameter '" +
              holder.name + "'");
}

std::vector<torch::Tensor> laterTiedCopies(const Model& model) {
  std::vector<torch::Tensor> out;
  for (const TiedWeight& weight : model.tied)
    for (std::size_t h = 1; h < weight.holders.size(); ++h) out.push_back(heldParameter(model, weight.holders[h]));
  return out;
}

void sumTiedGradients(const Model& model) {
  torch::NoGradGuard no_grad;
  for (const TiedWeight& weight : model.tied) {
    torch::Tensor sum;
    for (const auto& holder : weight.holders) {
      const torch::Tensor g = heldParameter(model, holder).grad();
      if (g.defined()) sum = sum.defined() ? sum + g : g.clone();
    }
    if (!sum.defined()) continue;
    for (const auto& holder : weight.holders) {
      torch::Tensor p = heldParameter(model, holder);
      if (p.grad().defined()) p.mutable_grad().copy_(sum);
      else p.mutable_grad() = sum.clone();
    }
  }
}

std::string describeHolders(const Model& model, const TiedWeight& weight) {
  std::string out;
  for (std::size_t i = 0; i < weight.holders.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == weight.holders.size() ? " and " : ", ") + "'" +
           model.layers.at(weight.holders[i].layer).name + "'";
  return out;
}

std::vector<std::string> batchNormLayers(const Model& model) {
  std::vector<std::string> out;
  const std::string suffix = "running_mean";
  for (const Layer& layer : model.layers)
    for (const auto& buffer : layer.module.ptr()->named_buffers(/*recurse=*/true)) {
      const std::string& name = buffer.key();
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        out.push_back(layer.name);
        break;
      }
    }
  return out;
}

graph::LayerGraph Model::layerGraph() const {
  using Clock = std::chrono::steady_clock;
  checkWiring(*this);
  EvalScope eval_scope(layers);
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> values{{kModelInput, constantInput(input, 1).to(device)}};  // one sample
  std::vector<graph::Layer> nodes;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    const Layer& layer = layers[l];
    graph::Layer node;
    node.name = layer.name;
    node.kind = layer.kind;
    node.inputs = graphInputs(*this, l);
    const std::vector<torch::Tensor> x = gatherInputs(*this, l, values);
    torch::Tensor y = forwardLayer(*this, l, x);  // warm-up (allocator, BLAS initialisation)
    // NOTE(rough-times): the minimum of three forward passes of one sample (the merge of
    // several inputs included), and backward parts guessed as one forward each. Good
    // enough to balance stages before the profiler measures forward and backward
    // properly at the real micro-batch size.
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto start = Clock::now();
      y = forwardLayer(*this, l, x);
      best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
    node.forward_seconds = best;
    node.backward_input_seconds = best;
    node.backward_weight_seconds = best;
    node.output_bytes = tensorBytes(y);
    // A first estimate: autograd keeps each op's inputs, which for a multi-op layer
    // (a transformer block) is several times its output. The profiler refines this.
    node.saved_activation_bytes = node.output_bytes;
    node.param_bytes = parameterBytes(layer);
    node.optimizer_state_bytes = 2 * node.param_bytes;  // Adam's two moments
    nodes.push_back(std::move(node));
    values[layer.name] = y;
  }
  return graph::LayerGraph(std::move(nodes), 1, "model '" + name + "'");
}

}  // namespace pipetrain::models
