#include "profile_setup.h"

#include <map>

#include "pipetrain/plan/profile_shares.h"
#include "pipetrain/util/error.h"

namespace pipetrain::profiler {
namespace {

// NOTE(identical-layers): models repeat their layers: ResNet-50's 16 bottleneck blocks
// are 4 kinds (the first of each stage downsamples), a transformer's blocks one. A layer
// whose module, parameters, buffers, inputs and output match an earlier layer's of the
// same share is not timed: it takes that layer's times, and a pass costs a fraction
// (docs/profiling.md, "Identical layers once"). What the signature cannot
// see, a module's plain attributes, is left to the run's measured stage times
// (plan/measured_profile.h). A layer's signature:
std::string signature(const models::Layer& layer, const std::vector<torch::Tensor>& inputs,
                      const torch::Tensor& output) {
  std::string s = layer.kind + "|" + layer.module.ptr()->name();
  const auto shape = [](const torch::Tensor& t) {
    std::string text = std::string(t.dtype().name()) + "[";
    for (int64_t d : t.sizes()) text += std::to_string(d) + ",";
    return text + "]";
  };
  for (const auto& p : layer.module.ptr()->named_parameters(/*recurse=*/true))
    s += "|p " + p.key() + " " + shape(p.value()) + (p.value().requires_grad() ? "" : " frozen");
  for (const auto& b : layer.module.ptr()->named_buffers(/*recurse=*/true)) s += "|b " + b.key() + " " + shape(b.value());
  for (const torch::Tensor& input : inputs) s += "|in " + shape(input);
  return s + "|out " + shape(output) + (layer.inputs.empty() ? "" : "|merge " + std::to_string(static_cast<int>(layer.merge)));
}

}  // namespace

torch::Device deviceOf(const models::Model& model) {
  for (const models::Layer& layer : model.layers)
    for (const torch::Tensor& p : layer.module.ptr()->parameters()) return p.device();
  return torch::kCPU;
}

// NOTE(typical-input): the batch the profile times. Some layers cost what their values
// make them cost: ReLU and max-pooling branch on every element, and an embedding that
// reads one row keeps it in cache, so a layer timed on a constant input ran far faster
// than on the data it trained on (docs/profiling.md, "Random, not constant, inputs").
// So the profile runs on random values drawn from its
// own generator with a fixed seed (the global generator, which seeds training, is left
// alone): uniform in [0, 1) for images and features, uniform tokens over the vocabulary,
// uniform indices where their range is known (zeros otherwise), and each named input's
// integers uniform over the range the data's take (an attention mask's 0 and 1).
torch::Tensor typicalInput(const models::InputSpec& input, int64_t batch) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(/*seed_in=*/20261123);
  auto shaped = [&](const std::vector<int64_t>& sample) {
    std::vector<int64_t> shape = {batch};
    shape.insert(shape.end(), sample.begin(), sample.end());
    return shape;
  };
  if (!input.named.empty()) {  // each as its kind: ids over their range, a mask of 0s and 1s
    std::vector<torch::Tensor> parts;
    for (const models::NamedInput& part : input.named)
      parts.push_back(part.integer ? torch::randint(std::max<int64_t>(part.range, 1), shaped(part.sample_shape),
                                                    generator, torch::kLong)
                                   : torch::rand(shaped(part.sample_shape), generator));
    return models::packInputs(input, parts);
  }
  const std::vector<int64_t> shape = shaped(input.sample_shape);
  switch (input.kind) {
    case models::InputKind::kImage:
    case models::InputKind::kFeatures: return torch::rand(shape, generator);
    case models::InputKind::kTokens: return torch::randint(input.num_classes, shape, generator, torch::kLong);
    case models::InputKind::kIndices:
      return input.vocab > 0 ? torch::randint(input.vocab, shape, generator, torch::kLong)
                             : torch::zeros(shape, torch::kLong);
  }
  throw Error("profile: unknown input kind");
}

// NOTE(input-loading): the first stage loads its micro-batch (inputs and labels) inside
// each forward pass; the profile's own input is made once, and missed that part of the
// first stage's forward pass (docs/profiling.md, "Loading the input"). `train` gives its
// profiles the dataset it trains on, and the loading is priced on the first layer that
// reads the model input (a stage that holds another reader loads it again; that is not
// priced).
int firstInputReader(const models::Model& model) {
  for (int l = 0; l < static_cast<int>(model.layers.size()); ++l)
    for (const std::string& input : models::layerInputs(model, l))
      if (input == models::kModelInput) return l;
  return -1;
}

torch::Tensor typicalLabels(const models::Model& model, const torch::Tensor& output) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(/*seed_in=*/20261125);
  if (model.input.loss == models::LossKind::kMeanSquaredError)
    return torch::rand(output.sizes(), generator).to(output.device());
  const std::vector<int64_t> shape(output.sizes().begin(), output.sizes().end() - 1);
  return torch::randint(output.size(-1), shape, generator, torch::kLong).to(output.device());
}

PreparedLayers prepareLayers(const models::Model& model, int64_t batch, runtime::Precision precision,
                             const torch::Device& device) {
  const int n = static_cast<int>(model.layers.size());
  PreparedLayers prepared;
  std::map<std::string, torch::Tensor> values{
      {models::kModelInput, typicalInput(model.input, batch).to(device)}};  // (batch, sample...)
  const std::map<std::string, int> last_reader = models::lastReaders(model);
  for (int l = 0; l < n; ++l) {
    const std::vector<std::string> sources = models::layerInputs(model, l);
    const std::vector<torch::Tensor> given = models::gatherInputs(model, l, values);
    LayerRun run{model, l, {}, {}, false, {}, precision};
    for (std::size_t k = 0; k < sources.size(); ++k) {
      // The model input needs no gradient (the first stage has nobody to send one to), so
      // a layer reading only the model input has no I part; every other input does.
      torch::Tensor input = given[k].detach();
      if (sources[k] != models::kModelInput && input.is_floating_point()) {
        input.requires_grad_(true);
        run.input_grad = true;
      }
      run.inputs.push_back(input);
    }
    for (const torch::Tensor& p : model.layers[l].module.ptr()->parameters())
      if (p.requires_grad()) run.params.push_back(p);
    run.grad_sums.resize(run.params.size());
    torch::Tensor output;
    {
      torch::NoGradGuard no_grad;
      output = run.forward();
    }
    prepared.output_bytes.push_back(models::tensorBytes(output));
    prepared.signatures.push_back(signature(model.layers[l], run.inputs, output));
    for (const std::string& source : sources)
      if (last_reader.at(source) == l) values.erase(source);
    values[model.layers[l].name] = output;
    prepared.runs.push_back(std::move(run));
  }
  // The model's output is its last layer's (models::forwardModel); NOTE(loss).
  prepared.labels = typicalLabels(model, values.at(model.layers.back().name));
  return prepared;
}

ShareLayers shareLayers(const models::Model& model, const std::vector<std::string>& signatures, int share,
                        int shares, bool time_identical_once) {
  const int n = static_cast<int>(model.layers.size());
  std::vector<int64_t> param_bytes;
  for (const models::Layer& layer : model.layers) param_bytes.push_back(models::parameterBytes(layer));
  const std::vector<int> bounds = plan::profileShares(param_bytes, shares);
  const int index = plan::shareOfProcess(share, static_cast<int>(bounds.size()) - 1);
  ShareLayers mine;
  mine.first = bounds[index];
  mine.end = bounds[index + 1];
  mine.slot.assign(n, -1);
  const int loading = firstInputReader(model);
  std::map<std::string, int> slot_of;  // signature -> slot in `timed`
  for (int l = mine.first; l < mine.end; ++l) {
    // The layer that loads the batch and the one that computes the loss do more than
    // their module: they are timed as themselves.
    const std::string key = time_identical_once && l != loading && l != n - 1 ? signatures[l] : "#" + std::to_string(l);
    const auto [it, added] = slot_of.emplace(key, static_cast<int>(mine.timed_layers.size()));
    if (added) mine.timed_layers.push_back(l);
    mine.slot[l] = it->second;
  }
  return mine;
}

}  // namespace pipetrain::profiler
