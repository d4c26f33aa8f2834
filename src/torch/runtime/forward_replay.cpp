#include "forward_replay.h"

#include <algorithm>
#include <mutex>
#include <set>

#include <ATen/Context.h>

namespace pipetrain::runtime {
namespace {

torch::Tensor generatorState(at::Generator generator) {  // a handle: copies share the generator
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void setGeneratorState(at::Generator generator, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// Puts the generator and the buffers back when the pass ends, also when it throws.
class Restore {
 public:
  Restore(at::Generator generator, const std::vector<torch::Tensor>& buffers)
      : generator_(std::move(generator)), state_(generatorState(generator_)), buffers_(buffers) {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& b : buffers_) saved_.push_back(b.clone());
  }
  ~Restore() {
    setGeneratorState(generator_, state_);
    torch::NoGradGuard no_grad;
    // Through .data(), which does not bump the version counter: the graph just built saves
    // the running statistics (batch norm's backward reads them), and a bump would make
    // autograd refuse them as modified. The pass's own in-place update bumps nothing either.
    for (std::size_t i = 0; i < buffers_.size(); ++i) buffers_[i].data().copy_(saved_[i]);
  }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  at::Generator generator_;
  torch::Tensor state_;
  const std::vector<torch::Tensor>& buffers_;
  std::vector<torch::Tensor> saved_;
};

}  // namespace

ForwardReplay::ForwardReplay(torch::Device device, std::map<std::string, torch::Tensor> inputs, torch::Tensor labels)
    : device_(device),
      inputs_(std::move(inputs)),
      labels_(std::move(labels)),
      generator_state_(generatorState(at::globalContext().defaultGenerator(device))) {}

PartRecomputed partRecomputed(const models::Model& model, const std::vector<int>& stage_layers, int recomputed,
                              const std::vector<int>& sent) {
  PartRecomputed part;
  part.layers.assign(stage_layers.begin(), stage_layers.begin() + recomputed);
  part.rest.assign(stage_layers.begin() + recomputed, stage_layers.end());
  std::set<std::string> read;
  for (int l : part.rest)
    for (const std::string& input : models::layerInputs(model, l)) read.insert(input);
  for (int l : sent) read.insert(model.layers[l].name);
  for (int l : part.layers)
    if (read.count(model.layers[l].name)) part.kept.push_back(l);
  return part;
}

std::map<std::string, torch::Tensor> forwardKeeping(const models::Model& model, const PartRecomputed& part,
                                                    std::map<std::string, torch::Tensor> values,
                                                    std::vector<std::pair<int, torch::Tensor>>& kept) {
  {
    torch::NoGradGuard no_graph;
    values = models::forwardLayers(model, part.layers, std::move(values));
  }
  for (int l : part.layers) {
    const auto it = values.find(model.layers[l].name);
    if (std::find(part.kept.begin(), part.kept.end(), l) == part.kept.end()) {
      values.erase(it);
      continue;
    }
    torch::Tensor leaf = it->second.detach();
    if (leaf.is_floating_point()) leaf.requires_grad_(true);
    it->second = leaf;
    kept.emplace_back(l, leaf);
  }
  return models::forwardLayers(model, part.rest, std::move(values));
}

void ForwardReplay::run(const std::vector<torch::Tensor>& buffers, const std::function<void()>& forward) const {
  at::Generator generator = at::globalContext().defaultGenerator(device_);
  const Restore restore(generator, buffers);
  setGeneratorState(generator, generator_state_);
  forward();
}

}  // namespace pipetrain::runtime
