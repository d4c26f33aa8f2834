// The wiring of models that are DAGs of layers: resolved inputs, merges, the checks that
// name the layer at fault, and forwardLayers' refusals. The zoo's DAG models themselves
// (shapes, splits, layer graphs) are in models_test.cpp.
#include <gtest/gtest.h>

#include "../core/expect_error.h"
#include "pipetrain/torch/models.h"

namespace pipetrain::models {
namespace {

namespace nn = torch::nn;
using testing::expectError;
using Names = std::vector<std::string>;

// conv1 -> conv2 and mlp, both from the input; fusion reads conv2 and mlp; head.
Model smallBranch() { return buildModel("fmnist-branch", {{"channels", 2}, {"hidden", 8}}, 0); }

int indexOf(const Model& model, const std::string& name) {
  for (int l = 0; l < static_cast<int>(model.layers.size()); ++l)
    if (model.layers[l].name == name) return l;
  ADD_FAILURE() << "no layer " << name;
  return -1;
}

TEST(ModelsWiring, EmptyInputsResolveToThePredecessor) {
  const Model mlp = buildModel("mlp", {{"input", 4}, {"layers", 2}, {"width", 3}});
  EXPECT_EQ(layerInputs(mlp, 0), Names{kModelInput});
  EXPECT_EQ(layerInputs(mlp, 2), Names{"fc1"});
  EXPECT_EQ(graphInputs(mlp, 0), Names{});
  EXPECT_EQ(graphInputs(mlp, 2), Names{"fc1"});

  const Model branch = smallBranch();
  EXPECT_EQ(layerInputs(branch, indexOf(branch, "conv2")), Names{"conv1"});
  EXPECT_EQ(layerInputs(branch, indexOf(branch, "mlp")), Names{kModelInput});
  EXPECT_EQ(graphInputs(branch, indexOf(branch, "mlp")), Names{});
  EXPECT_EQ(layerInputs(branch, indexOf(branch, "fusion")), (Names{"conv2", "mlp"}));
  // The input is last read by mlp; the head's output, the model's, by nobody.
  EXPECT_EQ(lastReaders(branch), (std::map<std::string, int>{
                                     {kModelInput, 2}, {"conv1", 1}, {"conv2", 3}, {"mlp", 3}, {"fusion", 4}}));
  expectError([&] { layerInputs(branch, 5); }, {"fmnist-branch", "no layer 5"});
  expectError([&] { layerInputs(branch, -1); }, {"fmnist-branch", "no layer -1"});
}

// a and b read the input; sum = a + b; out = [a, b, sum] along dim 1.
Model mergeModel() {
  Model model;
  model.name = "merges";
  model.input.kind = InputKind::kFeatures;
  model.input.sample_shape = {3};
  model.input.num_classes = 2;
  torch::manual_seed(1);
  model.layers.push_back(Layer{"a", "linear", nn::AnyModule(nn::Linear(3, 2)), {kModelInput}});
  model.layers.push_back(Layer{"b", "linear", nn::AnyModule(nn::Linear(3, 2)), {kModelInput}});
  model.layers.push_back(Layer{"sum", "add", nn::AnyModule(nn::Identity()), {"a", "b"}, Merge::kSum});
  model.layers.push_back(Layer{"out", "concat", nn::AnyModule(nn::Identity()), {"a", "b", "sum"}});
  return model;
}

TEST(ModelsWiring, MergesConcatenateOrSum) {
  const Model model = mergeModel();
  checkWiring(model);
  EXPECT_FALSE(isChain(model));
  const torch::Tensor x = torch::randn({5, 3});
  const torch::Tensor a = forwardLayer(model, 0, {x}), b = forwardLayer(model, 1, {x});  // (5, 2) each
  EXPECT_TRUE(torch::equal(forwardModel(model, x), torch::cat({a, b, a + b}, 1)));  // (5, 6)

  expectError([&] { forwardLayer(model, 2, {a, torch::zeros({5, 3})}); }, {"'sum'", "sums", "[5, 2]", "[5, 3]"});
  expectError([&] { forwardLayer(model, 3, {a, b, torch::zeros({4, 2})}); }, {"'out'", "concatenate", "[4, 2]"});
  expectError([&] { forwardLayer(model, 3, {a, b}); }, {"'out'", "takes 3 inputs, not 2"});
}

// `change` applied to the small fmnist-branch model must fail checkWiring (and with it
// the whole-model passes) with an Error naming every one of `words`.
template <typename Change>
void expectMiswired(Change change, const Names& words) {
  Model model = smallBranch();
  change(model);
  expectError([&] { checkWiring(model); }, words);
  expectError([&] { forwardModel(model, torch::zeros({1, 1, 28, 28})); }, words);
  expectError([&] { model.layerGraph(); }, words);
}

// A layer may read the model's input beside other layers: each stage holding it reads the
// input from the data, so the layer graph has no edge for it.
TEST(ModelsWiring, ALayerMayReadTheModelInputBesideLayers) {
  Model m = buildModel("fmnist-branch");
  const int fusion = indexOf(m, "fusion");
  m.layers[fusion].inputs = {kModelInput, "conv2", "mlp"};
  checkWiring(m);
  EXPECT_EQ(graphInputs(m, fusion), (std::vector<std::string>{"conv2", "mlp"}));
  EXPECT_TRUE(graphInputs(m, 0).empty());
}

TEST(ModelsWiring, CheckWiringNamesTheLayerAtFault) {
  auto layer = [](Model& m, const std::string& name) -> Layer& { return m.layers[indexOf(m, name)]; };
  expectMiswired([&](Model& m) { layer(m, "fusion").inputs = {"conv2", "mpl"}; },
                 {"fmnist-branch", "'fusion'", "'mpl'", "neither"});
  expectMiswired([&](Model& m) { layer(m, "conv1").inputs = {"mlp"}; }, {"'conv1'", "'mlp'", "topological"});
  expectMiswired([&](Model& m) { layer(m, "fusion").inputs = {"conv2", "conv2"}; }, {"'fusion'", "'conv2' twice"});
  expectMiswired([&](Model& m) { layer(m, "fusion").inputs = {"conv2"}; }, {"'mlp'", "read by no later layer"});
  expectMiswired([&](Model& m) { layer(m, "mlp").name = "conv1"; }, {"layers 0 and 2", "'conv1'"});
  expectMiswired([&](Model& m) { layer(m, "head").name = kModelInput; }, {"layer 4", "'input'"});
  expectMiswired([&](Model& m) { layer(m, "head").name = ""; }, {"layer 4 has no name"});
  expectMiswired([&](Model& m) { m.layers.clear(); }, {"fmnist-branch", "no layers"});
}

TEST(ModelsWiring, ForwardLayersNamesWhatIsMissing) {
  const Model model = smallBranch();
  const torch::Tensor x = torch::zeros({2, 1, 28, 28});
  const auto front = forwardLayers(model, {0, 1}, {{kModelInput, x}});  // conv1, conv2
  EXPECT_EQ(front.size(), 3u);                                          // the input and both outputs
  expectError([&] { forwardLayers(model, {3, 4}, {{"conv2", front.at("conv2")}}); },
              {"fmnist-branch", "'fusion'", "'mlp'", "neither given nor computed"});
  expectError([&] { forwardLayers(model, {2, 0}, {{kModelInput, x}}); }, {"increasing", "layer 0 follows layer 2"});
  expectError([&] { forwardLayers(model, {5}, {}); }, {"no layer 5"});
  // Given the values that cross into it, the rest runs: mlp from the input, fusion and head.
  const auto rest = forwardLayers(model, {2, 3, 4}, {{kModelInput, x}, {"conv2", front.at("conv2")}});
  EXPECT_TRUE(torch::equal(rest.at("head"), forwardModel(model, x)));
}

}  // namespace
}  // namespace pipetrain::models
