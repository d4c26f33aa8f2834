// Small models for MNIST-like data: a two-conv CNN, a plain MLP, and fmnist-branch, a
// convolutional and an MLP branch over the same image.
#include "zoo.h"

namespace pipetrain::models::zoo {

namespace nn = torch::nn;

namespace {

// conv 3x3 (same size) + ReLU + max-pool 2: (N, in, H, W) -> (N, out, H/2, W/2).
nn::Sequential convPool(int64_t in, int64_t out) {
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2));
}

}  // namespace

Model buildFmnistCnn(const ModelConfig& config) {
  const Options opt("fmnist-cnn", config, {{"channels", 32}, {"hidden", 128}, {"classes", 10}});
  const int64_t c = opt.atLeast("channels", 1);
  const int64_t hidden = opt.atLeast("hidden", 1);
  const int64_t classes = opt.atLeast("classes", 2);

  Model model;
  model.input = {InputKind::kImage, {1, 28, 28}, classes};
  // Each pooling stays with its conv, so a layer boundary never falls between them and
  // the tensor crossing stages is the small pooled one.
  model.layers.push_back(stackLayer("conv1", "conv", convPool(1, c)));      // (N, c, 14, 14)
  model.layers.push_back(stackLayer("conv2", "conv", convPool(c, 2 * c)));  // (N, 2c, 7, 7)
  model.layers.push_back(stackLayer("flatten_fc1", "linear",
                                    nn::Sequential(nn::Flatten(),  // (N, 2c*7*7)
                                                   nn::Linear(2 * c * 7 * 7, hidden), nn::ReLU())));  // (N, hidden)
  model.layers.push_back(stackLayer("fc2", "linear", nn::Sequential(nn::Linear(hidden, classes))));  // (N, classes)
  return model;
}

Model buildMlp(const ModelConfig& config) {
  const Options opt("mlp", config, {{"input", 784}, {"layers", 4}, {"width", 256}, {"classes", 10}});
  const int64_t input = opt.atLeast("input", 1);
  const int64_t depth = opt.atLeast("layers", 1);
  const int64_t width = opt.atLeast("width", 1);
  const int64_t classes = opt.atLeast("classes", 2);

  Model model;
  model.input = {InputKind::kFeatures, {input}, classes};
  for (int64_t i = 0; i < depth; ++i) {
    model.layers.push_back(stackLayer("fc" + std::to_string(i), "linear",
                                      nn::Sequential(nn::Linear(i == 0 ? input : width, width),  // (N, width)
                                                     nn::ReLU())));
  }
  model.layers.push_back(stackLayer("head", "linear", nn::Sequential(nn::Linear(width, classes))));  // (N, classes)
  return model;
}

// Two views of one image: the conv branch (conv1, conv2: the fmnist-cnn's convolutions,
// flattened) sees local patterns, the MLP branch (mlp) the whole image at once; fusion
// concatenates both and head gives the class scores.
Model buildFmnistBranch(const ModelConfig& config) {
  const Options opt("fmnist-branch", config, {{"channels", 16}, {"hidden", 128}, {"classes", 10}});
  const int64_t c = opt.atLeast("channels", 1);
  const int64_t hidden = opt.atLeast("hidden", 1);
  const int64_t classes = opt.atLeast("classes", 2);

  Model model;
  model.input = {InputKind::kImage, {1, 28, 28}, classes};
  model.layers.push_back(stackLayer("conv1", "conv", convPool(1, c), {kModelInput}));  // (N, c, 14, 14)
  nn::Sequential conv2 = convPool(c, 2 * c);  // (N, 2c, 7, 7)
  conv2->push_back(nn::Flatten());             // (N, 2c*7*7): concatenable with the MLP branch
  model.layers.push_back(stackLayer("conv2", "conv", conv2));
  model.layers.push_back(stackLayer("mlp", "linear",
                                    nn::Sequential(nn::Flatten(), nn::Linear(28 * 28, hidden), nn::ReLU()),  // (N, hidden)
                                    {kModelInput}));
  addFusionHead(model, {"conv2", "mlp"}, 2 * c * 7 * 7 + hidden, hidden, classes);  // -> (N, classes)
  return model;
}

}  // namespace pipetrain::models::zoo
