// Internal to the model zoo: the option reader every builder uses and the builders
// themselves, one per model, registered by name in registry.cpp.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/torch/models.h"

namespace pipetrain::models::zoo {

// A model's integer options: the caller's config laid over the model's defaults.
// Construction rejects unknown keys with an Error listing the known ones, so a typo
// ("widht") never silently falls back to a default.
class Options {
 public:
  Options(std::string model, const ModelConfig& given, ModelConfig defaults);

  int64_t get(const std::string& key) const;
  // get(key), but an Error naming the key unless value >= min.
  int64_t atLeast(const std::string& key, int64_t min) const;
  // An Error naming the model and `message` (e.g. "'width' must be a multiple of 'heads'").
  [[noreturn]] void fail(const std::string& message) const;

 private:
  std::string model_;
  ModelConfig values_;
};

// A layer whose body is a plain torch::nn::Sequential. AnyModule cannot hold a
// Sequential directly (its forward() is a template), so this gives it a Tensor -> Tensor
// forward.
struct StackImpl : torch::nn::Module {
  explicit StackImpl(torch::nn::Sequential body) : body(register_module("body", std::move(body))) {}
  torch::Tensor forward(torch::Tensor x) { return body->forward(x); }
  torch::nn::Sequential body;
};
TORCH_MODULE(Stack);

// `inputs` and `merge` as in Layer: left out, the layer reads its predecessor.
inline Layer stackLayer(std::string name, std::string kind, torch::nn::Sequential body,
                        std::vector<std::string> inputs = {}, Merge merge = Merge::kConcat) {
  return Layer{std::move(name), std::move(kind), torch::nn::AnyModule(Stack(std::move(body))), std::move(inputs),
               merge};
}

// The end the multi-branch models share: "fusion" reads `branches` concatenated, (N, in),
// and maps them to (N, hidden) (linear + ReLU); "head" gives the class scores (N, classes).
inline void addFusionHead(Model& model, std::vector<std::string> branches, int64_t in, int64_t hidden,
                          int64_t classes) {
  namespace nn = torch::nn;
  model.layers.push_back(
      stackLayer("fusion", "linear", nn::Sequential(nn::Linear(in, hidden), nn::ReLU()), std::move(branches)));
  model.layers.push_back(stackLayer("head", "linear", nn::Sequential(nn::Linear(hidden, classes))));
}

// Columns [first, first + count) of dim 1: how a branch that reads the model input
// picks its own view of it (a slice of features, one modality's tokens).
struct ColumnsImpl : torch::nn::Module {
  ColumnsImpl(int64_t first, int64_t count) : first(first), count(count) {}
  torch::Tensor forward(torch::Tensor x) { return x.narrow(1, first, count); }  // (N, count, ...)
  int64_t first, count;
};
TORCH_MODULE(Columns);

// Builders. REQUIRES: the caller has seeded the global generator (buildModel does), since
// parameters are drawn from it in construction order.
Model buildFmnistCnn(const ModelConfig& config);
Model buildMlp(const ModelConfig& config);
Model buildVgg16(const ModelConfig& config);
Model buildResnet50(const ModelConfig& config);
Model buildGpt(const ModelConfig& config);
Model buildMultimodal(const ModelConfig& config);
Model buildDlrm(const ModelConfig& config);
Model buildCandleUno(const ModelConfig& config);
Model buildFmnistBranch(const ModelConfig& config);

}  // namespace pipetrain::models::zoo
