// The wiring of a model's layers: what each layer reads, the checks that make the
// layers a DAG with one output, and forward passes over any set of layers.
#include <algorithm>

#include "pipetrain/torch/models.h"
#include "pipetrain/util/error.h"

namespace pipetrain::models {
namespace {

[[noreturn]] void fail(const Model& model, const std::string& what) {
  throw Error("model '" + model.name + "': " + what);
}

void checkIndex(const Model& model, int layer) {
  if (layer < 0 || layer >= static_cast<int>(model.layers.size()))
    fail(model, "there is no layer " + std::to_string(layer) + " (it has " + std::to_string(model.layers.size()) +
                    ")");
}

// What a layer with no `inputs` reads.
std::string defaultInput(const Model& model, int layer) {
  return layer == 0 ? kModelInput : model.layers[layer - 1].name;
}

std::string shapesOf(const std::vector<torch::Tensor>& tensors) {
  std::string out;
  for (const torch::Tensor& t : tensors) out += (out.empty() ? "" : ", ") + c10::str(t.sizes());
  return out;
}

torch::Tensor merge(const Model& model, const Layer& layer, const std::vector<torch::Tensor>& inputs) {
  if (inputs.size() == 1) return inputs.front();
  if (layer.merge == Merge::kPack) return flatPack(inputs);
  if (layer.merge == Merge::kSum) {
    // Equal shapes, not broadcasting: a residual join of mismatched branches is a bug in
    // the model, and broadcasting would hide it.
    torch::Tensor sum = inputs.front();
    for (std::size_t k = 1; k < inputs.size(); ++k) {
      if (!inputs[k].sizes().equals(sum.sizes()))
        fail(model, "layer '" + layer.name + "' sums inputs of different shapes " + shapesOf(inputs));
      sum = sum + inputs[k];
    }
    return sum;
  }
  try {
    return torch::cat(inputs, 1);
  } catch (const c10::Error&) {
    fail(model, "layer '" + layer.name + "' cannot concatenate its inputs " + shapesOf(inputs) +
                    " along dim 1 (every other dimension must agree)");
  }
}

}  // namespace

std::vector<std::string> layerInputs(const Model& model, int layer) {
  checkIndex(model, layer);
  const std::vector<std::string>& given = model.layers[layer].inputs;
  return given.empty() ? std::vector<std::string>{defaultInput(model, layer)} : given;
}

std::vector<std::string> graphInputs(const Model& model, int layer) {
  // The model input is read from the data by each stage that needs it: no edge.
  std::vector<std::string> inputs = layerInputs(model, layer);
  inputs.erase(std::remove(inputs.begin(), inputs.end(), std::string(kModelInput)), inputs.end());
  return inputs;
}

bool isChain(const Model& model) {
  for (int l = 0; l < static_cast<int>(model.layers.size()); ++l)
    if (layerInputs(model, l) != std::vector<std::string>{defaultInput(model, l)}) return false;
  return true;
}

void checkWiring(const Model& model) {
  const int n = static_cast<int>(model.layers.size());
  if (n == 0) fail(model, "it has no layers");
  std::map<std::string, int> index;
  for (int l = 0; l < n; ++l) {
    const std::string& name = model.layers[l].name;
    if (name.empty()) fail(model, "layer " + std::to_string(l) + " has no name");
    if (name == kModelInput)
      fail(model, "layer " + std::to_string(l) + " is named '" + kModelInput +
                      "', the name by which layers read the model's input");
    const auto [at, fresh] = index.emplace(name, l);
    if (!fresh)
      fail(model, "layers " + std::to_string(at->second) + " and " + std::to_string(l) + " are both named '" + name +
                      "'");
  }
  std::vector<bool> read(n, false);
  for (int l = 0; l < n; ++l) {
    const std::vector<std::string> inputs = layerInputs(model, l);
    const std::string layer = "layer '" + model.layers[l].name + "'";
    for (auto source = inputs.begin(); source != inputs.end(); ++source) {
      if (std::find(inputs.begin(), source, *source) != source) fail(model, layer + " reads '" + *source + "' twice");
      if (*source == kModelInput) continue;
      const auto it = index.find(*source);
      if (it == index.end())
        fail(model, layer + " reads '" + *source + "', which is neither '" + kModelInput + "' nor a layer of the model");
      if (it->second >= l)
        fail(model, layer + " reads '" + *source +
                        "', which does not come before it (layers must be listed in a topological order)");
      read[it->second] = true;
    }
  }
  for (int l = 0; l + 1 < n; ++l)
    if (!read[l])
      fail(model, "the output of layer '" + model.layers[l].name +
                      "' is read by no later layer; only the last layer's output, the model's, may be unread");
}

std::map<std::string, int> lastReaders(const Model& model) {
  std::map<std::string, int> out;
  for (int l = 0; l < static_cast<int>(model.layers.size()); ++l)
    for (const std::string& source : layerInputs(model, l)) out[source] = l;
  return out;
}

std::vector<torch::Tensor> gatherInputs(const Model& model, int layer,
                                        const std::map<std::string, torch::Tensor>& values) {
  std::vector<torch::Tensor> out;
  for (const std::string& source : layerInputs(model, layer)) {
    const auto it = values.find(source);
    if (it == values.end())
      fail(model, "layer '" + model.layers[layer].name + "' reads '" + source +
                      "', which is neither given nor computed before it");
    out.push_back(it->second);
  }
  return out;
}

torch::Tensor forwardLayer(const Model& model, int layer, const std::vector<torch::Tensor>& inputs) {
  checkIndex(model, layer);
  const Layer& l = model.layers[layer];
  const std::size_t expected = l.inputs.empty() ? 1 : l.inputs.size();
  if (inputs.size() != expected)
    fail(model, "layer '" + l.name + "' takes " + std::to_string(expected) + " inputs, not " +
                    std::to_string(inputs.size()));
  // AnyModule::forward is non-const; a copy of the AnyModule shares the module itself
  // (a shallow handle), so calling through it leaves the layer untouched.
  torch::nn::AnyModule module = l.module;
  return module.forward(merge(model, l, inputs));
}

std::map<std::string, torch::Tensor> forwardLayers(const Model& model, const std::vector<int>& layers,
                                                   std::map<std::string, torch::Tensor> values) {
  int previous = -1;
  for (int l : layers) {
    checkIndex(model, l);
    if (l <= previous)
      fail(model, "forwardLayers runs layers in increasing index order (a topological one); layer " +
                      std::to_string(l) + " follows layer " + std::to_string(previous));
    previous = l;
    values[model.layers[l].name] = forwardLayer(model, l, gatherInputs(model, l, values));
  }
  return values;
}

torch::Tensor forwardModel(const Model& model, torch::Tensor input,
                           const std::function<void(int, const torch::Tensor&)>& on_output) {
  checkWiring(model);
  const std::map<std::string, int> last_reader = lastReaders(model);
  std::map<std::string, torch::Tensor> values{{kModelInput, std::move(input)}};
  for (int l = 0; l < static_cast<int>(model.layers.size()); ++l) {
    torch::Tensor y = forwardLayer(model, l, gatherInputs(model, l, values));
    if (on_output) on_output(l, y);
    for (const std::string& source : layerInputs(model, l))
      if (last_reader.at(source) == l) values.erase(source);  // without grad, its memory goes now
    values[model.layers[l].name] = std::move(y);
  }
  return values.at(model.layers.back().name);
}

}  // namespace pipetrain::models
