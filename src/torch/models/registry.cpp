// Model names, config checking and the seeded entry point buildModel().
#include <cassert>
#include <functional>
#include <utility>

#include "pipetrain/util/error.h"
#include "zoo.h"

namespace pipetrain::models {
namespace zoo {
namespace {

std::string joinKeys(const ModelConfig& config) {
  std::string out;
  for (const auto& [key, value] : config) out += (out.empty() ? "" : ", ") + key;
  return out;
}

}  // namespace

Options::Options(std::string model, const ModelConfig& given, ModelConfig defaults)
    : model_(std::move(model)), values_(std::move(defaults)) {
  for (const auto& [key, value] : given) {
    auto it = values_.find(key);
    if (it == values_.end()) fail("unknown config key '" + key + "' (known: " + joinKeys(values_) + ")");
    it->second = value;
  }
}

int64_t Options::get(const std::string& key) const {
  auto it = values_.find(key);
  // A builder asking for a key it did not declare is a bug in the zoo, not user input.
  assert(it != values_.end());
  return it->second;
}

int64_t Options::atLeast(const std::string& key, int64_t min) const {
  const int64_t value = get(key);
  if (value < min) fail("config '" + key + "' = " + std::to_string(value) + " must be >= " + std::to_string(min));
  return value;
}

void Options::fail(const std::string& message) const {
  throw Error("model '" + model_ + "': " + message);
}

}  // namespace zoo

namespace {

using Builder = std::function<Model(const ModelConfig&)>;

// One table for names and builders, so modelNames() cannot drift from buildModel().
const std::vector<std::pair<std::string, Builder>>& registry() {
  static const std::vector<std::pair<std::string, Builder>> table = {
      {"fmnist-cnn", zoo::buildFmnistCnn}, {"mlp", zoo::buildMlp},
      {"vgg16", zoo::buildVgg16},          {"resnet50", zoo::buildResnet50},
      {"gpt", zoo::buildGpt},              {"multimodal", zoo::buildMultimodal},
      {"dlrm", zoo::buildDlrm},            {"candle-uno", zoo::buildCandleUno},
      {"fmnist-branch", zoo::buildFmnistBranch},
  };
  return table;
}

}  // namespace

const std::vector<std::string>& modelNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : registry()) out.push_back(entry.first);
    return out;
  }();
  return names;
}

Model buildModel(const std::string& name, const ModelConfig& config, uint64_t seed) {
  for (const auto& [known, build] : registry()) {
    if (known != name) continue;
    // Seeding here, right before the first parameter is drawn, is what makes every rank
    // build bitwise-identical layers: builders draw from the global generator in layer
    // order and nothing else may draw in between. (It also resets the caller's global
    // generator; draw data-order randomness from a generator of your own.)
    torch::manual_seed(seed);
    Model model = build(config);
    model.name = name;
    checkWiring(model);  // a zoo model wired wrongly fails here, not in some later pass
    return model;
  }
  std::string names;
  for (const std::string& known : modelNames()) names += (names.empty() ? "" : ", ") + known;
  throw Error("unknown model '" + name + "' (known: " + names + ")");
}

}  // namespace pipetrain::models
