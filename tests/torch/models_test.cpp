// The model zoo: shapes, stage splits (runs of a chain's layers, and any topological
// split of a DAG's), seeded determinism, the LayerGraph it reports, the loss, GPT
// causality, and errors for bad names and configs. Small configs keep the whole file to
// a few seconds. The wiring of DAG models: model_wiring_test.cpp.
#include "pipetrain/torch/models.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "../core/expect_error.h"

namespace pipetrain::models {
namespace {

using testing::expectError;

struct Case {
  std::string name;
  ModelConfig config;
  int layers;                        // expected layer count
  std::vector<int64_t> output_tail;  // output shape after the batch dimension
  bool chain = true;                 // every layer reads its predecessor
};

// Index inputs (multimodal's tokens) are drawn below this; every such case's vocabulary
// is at least as large.
constexpr int64_t kIndexRange = 16;

const std::vector<Case>& smallCases() {
  static const std::vector<Case> cases = {
      {"fmnist-cnn", {{"channels", 4}, {"hidden", 16}}, 4, {10}},
      {"mlp", {{"input", 20}, {"layers", 3}, {"width", 16}, {"classes", 5}}, 4, {5}},
      {"vgg16", {{"width", 4}, {"hidden", 16}, {"image_size", 32}}, 16, {10}},
      {"resnet50", {{"width", 4}, {"image_size", 32}}, 18, {10}},
      {"resnet50", {{"width", 4}, {"image_size", 28}, {"norm", 0}, {"classes", 7}}, 18, {7}},
      {"gpt", {{"layers", 2}, {"width", 16}, {"heads", 2}, {"context", 8}, {"vocab", 32}}, 4, {8, 32}},
      // Two branches of embed, block, pool; fusion; head.
      {"multimodal",
       {{"branches", 2}, {"layers", 1}, {"width", 16}, {"heads", 2}, {"context", 4}, {"vocab", kIndexRange}, {"classes", 5}},
       8, {5}, false},
      // bottom0, bottom1, three tables, interaction, top0, head.
      {"dlrm", {{"dense", 5}, {"tables", 3}, {"rows", 20}, {"dim", 4}, {"hidden", 8}}, 8, {2}, false},
      {"candle-uno", {{"branches", 2}, {"features", 6}, {"layers", 2}, {"width", 8}, {"classes", 3}}, 6, {3}, false},
      {"fmnist-branch", {{"channels", 2}, {"hidden", 8}}, 5, {10}, false},
  };
  return cases;
}

// A batch of `n` samples for `model`, drawn from a generator of its own.
torch::Tensor sampleInput(const Model& model, int64_t n, uint64_t seed = 7) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), model.input.sample_shape.begin(), model.input.sample_shape.end());
  if (model.input.kind == InputKind::kTokens) return torch::randint(model.input.num_classes, shape, gen, torch::kLong);
  if (model.input.kind == InputKind::kIndices) return torch::randint(kIndexRange, shape, gen, torch::kLong);
  // dlrm's categorical columns too: its tables hash any float to a row.
  return torch::randn(shape, gen);
}

int64_t numel(const std::vector<torch::Tensor>& tensors) {
  int64_t total = 0;
  for (const torch::Tensor& t : tensors) total += t.numel();
  return total;
}

TEST(Models, NamesTheNineModels) {
  EXPECT_EQ(modelNames(), (std::vector<std::string>{"fmnist-cnn", "mlp", "vgg16", "resnet50", "gpt", "multimodal",
                                                    "dlrm", "candle-uno", "fmnist-branch"}));
}

TEST(Models, TheFirstFiveAreChainsTheRestGraphs) {
  for (const Case& c : smallCases()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(isChain(buildModel(c.name, c.config, 0)), c.chain);
  }
  // Every model is among the cases (the default sizes would take a second to build).
  for (const std::string& name : modelNames()) {
    const auto& cases = smallCases();
    EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [&](const Case& c) { return c.name == name; })) << name;
  }
}

TEST(Models, ForwardGivesTheDeclaredShape) {
  for (const Case& c : smallCases()) {
    SCOPED_TRACE(c.name);
    const Model model = buildModel(c.name, c.config, 1);
    EXPECT_EQ(model.name, c.name);
    ASSERT_EQ(static_cast<int>(model.layers.size()), c.layers);
    const torch::Tensor y = forwardModel(model, sampleInput(model, 2));
    std::vector<int64_t> expected = {2};
    expected.insert(expected.end(), c.output_tail.begin(), c.output_tail.end());
    EXPECT_EQ(y.sizes().vec(), expected);
    EXPECT_EQ(y.dtype(), torch::kFloat);
  }
}

TEST(Models, LayerNamesFollowTheArchitecture) {
  auto names = [](const Model& m) {
    std::vector<std::string> out;
    for (const Layer& l : m.layers) out.push_back(l.name);
    return out;
  };
  EXPECT_EQ(names(buildModel("fmnist-cnn")), (std::vector<std::string>{"conv1", "conv2", "flatten_fc1", "fc2"}));
  EXPECT_EQ(names(buildModel("mlp", {{"layers", 2}})), (std::vector<std::string>{"fc0", "fc1", "head"}));
  const Model vgg = buildModel("vgg16", {{"width", 2}, {"hidden", 4}});
  EXPECT_EQ(vgg.layers.front().name, "conv1_1");
  EXPECT_EQ(vgg.layers[12].name, "conv5_3");
  EXPECT_EQ(vgg.layers.back().name, "fc3");
  const Model resnet = buildModel("resnet50", {{"width", 2}, {"image_size", 32}});
  EXPECT_EQ(resnet.layers.front().name, "stem");
  EXPECT_EQ(resnet.layers[16].name, "block15");
  EXPECT_EQ(resnet.layers.back().name, "head");
  EXPECT_EQ(names(buildModel("fmnist-branch")), (std::vector<std::string>{"conv1", "conv2", "mlp", "fusion", "head"}));
  EXPECT_EQ(names(buildModel("multimodal", {{"branches", 2}, {"layers", 1}})),
            (std::vector<std::string>{"b0_embed", "b0_block0", "b0_pool", "b1_embed", "b1_block0", "b1_pool", "fusion",
                                      "head"}));
  EXPECT_EQ(names(buildModel("dlrm", {{"tables", 2}})),
            (std::vector<std::string>{"bottom0", "bottom1", "table0", "table1", "interaction", "top0", "head"}));
  EXPECT_EQ(names(buildModel("candle-uno", {{"branches", 2}, {"layers", 1}})),
            (std::vector<std::string>{"b0_fc0", "b1_fc0", "fusion", "head"}));
}

TEST(Models, ChainStagesComposeToTheFullForward) {
  for (const Case& c : smallCases()) {
    SCOPED_TRACE(c.name);
    const Model model = buildModel(c.name, c.config, 2);
    const torch::Tensor x = sampleInput(model, 3);
    const torch::Tensor full = forwardModel(model, x);
    if (!c.chain) {
      expectError([&] { forwardRange(model, 0, c.layers, x); }, {c.name, "graph of layers", "forwardLayers"});
      continue;
    }
    EXPECT_TRUE(torch::equal(forwardRange(model, 0, c.layers, x), full));
    for (int k = 0; k <= c.layers; ++k) {
      const torch::Tensor split = forwardRange(model, k, c.layers, forwardRange(model, 0, k, x));
      EXPECT_TRUE(torch::equal(split, full)) << "split at " << k;
    }
  }
}

// Every split of the layers into a front closed under inputs (each front layer's
// producers are in the front) and the rest: the rest, given only the values that cross
// into it (the model input among them where it reads it), completes the whole forward
// exactly. These are the two-stage cuts of any pipeline over the DAG.
TEST(Models, ForwardLayersComposeOverEveryTopologicalSplit) {
  for (const Case& c : smallCases()) {
    SCOPED_TRACE(c.name);
    const Model model = buildModel(c.name, c.config, 2);
    const int n = static_cast<int>(model.layers.size());
    std::map<std::string, int> index;
    for (int l = 0; l < n; ++l) index[model.layers[l].name] = l;
    std::vector<uint32_t> producers(n, 0);  // bit p: layer p is an input
    for (int l = 0; l < n; ++l)
      for (const std::string& source : layerInputs(model, l))
        if (source != kModelInput) producers[l] |= 1u << index.at(source);
    const torch::Tensor x = sampleInput(model, 3);
    const torch::Tensor whole = forwardModel(model, x);
    const std::string output = model.layers.back().name;
    int splits = 0;
    for (uint32_t front = 0; front < (1u << n); ++front) {
      bool closed = true;
      for (int l = 0; l < n; ++l) closed = closed && (!(front >> l & 1) || (producers[l] & ~front) == 0);
      if (!closed) continue;
      std::vector<int> first, rest;
      for (int l = 0; l < n; ++l) (front >> l & 1 ? first : rest).push_back(l);
      const auto computed = forwardLayers(model, first, {{kModelInput, x}});
      std::map<std::string, torch::Tensor> crossing;
      for (int l : rest)
        for (const std::string& source : layerInputs(model, l))
          if (source == kModelInput || front >> index.at(source) & 1) crossing[source] = computed.at(source);
      const auto finished = forwardLayers(model, rest, crossing);
      EXPECT_TRUE(torch::equal((rest.empty() ? computed : finished).at(output), whole)) << "front mask " << front;
      ++splits;
    }
    // A chain splits after each layer; parallel branches split in more ways.
    if (c.chain) EXPECT_EQ(splits, n + 1);
    else EXPECT_GT(splits, n + 1);
  }
}

TEST(Models, SameSeedBuildsBitwiseIdenticalParameters) {
  for (const Case& c : smallCases()) {
    SCOPED_TRACE(c.name);
    const Model a = buildModel(c.name, c.config, 42);
    const Model b = buildModel(c.name, c.config, 42);
    const Model other = buildModel(c.name, c.config, 43);
    const std::vector<torch::Tensor> pa = a.parameters(0, c.layers), pb = b.parameters(0, c.layers);
    const std::vector<torch::Tensor> po = other.parameters(0, c.layers);
    ASSERT_EQ(pa.size(), pb.size());
    bool all_same_as_other = true;
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
      all_same_as_other = all_same_as_other && torch::equal(pa[i], po[i]);
    }
    EXPECT_FALSE(all_same_as_other);
  }
}

TEST(Models, ParametersOfARangeConcatenate) {
  const Model model = buildModel("mlp", {{"input", 6}, {"layers", 2}, {"width", 5}, {"classes", 3}});
  EXPECT_EQ(model.parameters(0, 0).size(), 0u);
  EXPECT_EQ(model.parameters(0, 1).size(), 2u);  // weight and bias
  EXPECT_EQ(numel(model.parameters(0, 3)), numel(model.parameters(0, 2)) + numel(model.parameters(2, 3)));
  EXPECT_EQ(numel(model.parameters(0, 3)), (6 * 5 + 5) + (5 * 5 + 5) + (5 * 3 + 3));
  EXPECT_THROW(model.parameters(2, 1), Error);
  EXPECT_THROW(forwardRange(model, 0, 4, torch::zeros({1, 6})), Error);
}

TEST(Models, LayerGraphHasTheModelsEdgesAndParameterBytes) {
  for (const Case& c : smallCases()) {
    SCOPED_TRACE(c.name);
    const Model model = buildModel(c.name, c.config, 3);
    const graph::LayerGraph g = model.layerGraph();
    ASSERT_EQ(g.size(), c.layers);
    EXPECT_EQ(g.isChain(), c.chain);
    EXPECT_EQ(g.batchSize(), 1);
    int64_t param_bytes = 0;
    for (int i = 0; i < g.size(); ++i) {
      const graph::Layer& node = g.layer(i);
      EXPECT_EQ(node.name, model.layers[i].name);  // the model's order is kept
      // The layer graph says "reads the model input" with no inputs at all.
      const std::vector<std::string> inputs = layerInputs(model, i);
      if (inputs == std::vector<std::string>{kModelInput}) {
        EXPECT_TRUE(node.inputs.empty()) << node.name;
      } else {
        EXPECT_EQ(node.inputs, inputs) << node.name;
      }
      EXPECT_EQ(node.param_bytes, 4 * numel(model.parameters(i, i + 1)));
      EXPECT_EQ(node.optimizer_state_bytes, 2 * node.param_bytes);
      EXPECT_GT(node.output_bytes, 0);
      EXPECT_GT(node.forward_seconds, 0.0);
      param_bytes += node.param_bytes;
    }
    EXPECT_EQ(param_bytes, 4 * numel(model.parameters(0, c.layers)));
    int64_t output_elements = 1;
    for (int64_t d : c.output_tail) output_elements *= d;
    EXPECT_EQ(g.layer(c.layers - 1).output_bytes, 4 * output_elements);  // one fp32 sample
  }
}

TEST(Models, LayerGraphLeavesModelAndGeneratorAlone) {
  const Model model = buildModel("resnet50", {{"width", 2}, {"image_size", 32}}, 0);
  const auto bn = model.layers[0].module.ptr()->named_buffers();
  const torch::Tensor mean_before = bn["body.1.running_mean"].clone();
  torch::manual_seed(5);
  (void)model.layerGraph();
  const torch::Tensor after_profile = torch::randn({4});
  torch::manual_seed(5);
  EXPECT_TRUE(torch::equal(after_profile, torch::randn({4})));  // the dry run drew nothing
  EXPECT_TRUE(torch::equal(mean_before, bn["body.1.running_mean"]));
  for (const Layer& layer : model.layers) EXPECT_TRUE(layer.module.ptr()->is_training());
}

TEST(Models, LossIsMeanCrossEntropyAndBackpropagates) {
  const Model gpt = buildModel("gpt", {{"layers", 1}, {"width", 16}, {"heads", 4}, {"context", 8}, {"vocab", 32}});
  const torch::Tensor tokens = sampleInput(gpt, 2);  // (2, 8)
  const torch::Tensor loss = lossOf(gpt, forwardModel(gpt, tokens), tokens);
  EXPECT_EQ(loss.dim(), 0);
  // GPT-2's small initialisation gives nearly uniform predictions: loss ~ log(vocab).
  EXPECT_NEAR(loss.item<float>(), std::log(32.0f), 0.1);
  loss.backward();
  for (const torch::Tensor& p : gpt.parameters(0, 3)) EXPECT_TRUE(p.grad().defined());

  const Model mlp = buildModel("mlp", {{"input", 4}, {"layers", 1}, {"width", 8}, {"classes", 3}});
  const torch::Tensor logits = forwardModel(mlp, sampleInput(mlp, 5));  // (5, 3)
  const torch::Tensor labels = torch::tensor({0, 1, 2, 0, 1}, torch::kLong);
  const torch::Tensor expected = -torch::log_softmax(logits, 1).gather(1, labels.unsqueeze(1)).mean();
  EXPECT_TRUE(torch::allclose(lossOf(mlp, logits, labels), expected));
  EXPECT_THROW(lossOf(mlp, logits, labels.slice(0, 0, 4)), Error);
  EXPECT_THROW(lossOf(gpt, logits, labels), Error);
}

TEST(Models, GptIsCausal) {
  const Model gpt = buildModel("gpt", {{"layers", 2}, {"width", 16}, {"heads", 2}, {"context", 8}, {"vocab", 32}});
  const torch::Tensor tokens = sampleInput(gpt, 1);  // (1, 8)
  torch::Tensor changed = tokens.clone();
  changed[0][5] = (tokens[0][5].item<int64_t>() + 1) % 32;
  const torch::Tensor a = forwardModel(gpt, tokens), b = forwardModel(gpt, changed);  // (1, 8, 32)
  EXPECT_TRUE(torch::equal(a.slice(1, 0, 5), b.slice(1, 0, 5)));
  EXPECT_FALSE(torch::allclose(a.slice(1, 5, 6), b.slice(1, 5, 6)));
  // Shorter sequences than the context are fine; longer ones are refused.
  EXPECT_EQ(forwardModel(gpt, tokens.slice(1, 0, 3)).sizes().vec(), (std::vector<int64_t>{1, 3, 32}));
  EXPECT_THROW(forwardRange(gpt, 0, 1, torch::zeros({1, 9}, torch::kLong)), c10::Error);
}

TEST(Models, BadNamesAndConfigsAreErrorsNamingTheKey) {
  expectError([] { buildModel("gpt3"); }, {"gpt3", "fmnist-cnn", "resnet50"});
  expectError([] { buildModel("gpt", {{"widht", 8}}); }, {"widht", "context", "heads", "width"});
  expectError([] { buildModel("gpt", {{"width", 10}, {"heads", 4}}); }, {"width", "heads"});
  expectError([] { buildModel("gpt", {{"layers", 0}}); }, {"layers"});
  expectError([] { buildModel("mlp", {{"width", -1}}); }, {"width"});
  expectError([] { buildModel("vgg16", {{"image_size", 48}}); }, {"image_size", "32"});
  expectError([] { buildModel("resnet50", {{"norm", 2}}); }, {"norm"});
  expectError([] { buildModel("fmnist-cnn", {{"image_size", 32}}); }, {"image_size", "channels"});
  expectError([] { buildModel("multimodal", {{"width", 10}, {"heads", 4}}); }, {"multimodal", "width", "heads"});
  expectError([] { buildModel("multimodal", {{"branches", 0}}); }, {"multimodal", "branches"});
  expectError([] { buildModel("dlrm", {{"tables", 0}}); }, {"dlrm", "tables"});
  expectError([] { buildModel("candle-uno", {{"featurs", 4}}); }, {"candle-uno", "featurs", "features"});
}

}  // namespace
}  // namespace pipetrain::models
