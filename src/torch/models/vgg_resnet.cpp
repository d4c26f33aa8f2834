// ImageNet-style CNNs, scalable in width and image size: VGG-16 and ResNet-50.
#include "zoo.h"

namespace pipetrain::models::zoo {

namespace nn = torch::nn;

// ---------------------------------------------------------------- VGG-16

Model buildVgg16(const ModelConfig& config) {
  const Options opt("vgg16", config,
                    {{"width", 64}, {"image_size", 32}, {"channels", 3}, {"classes", 10}, {"hidden", 4096}});
  const int64_t width = opt.atLeast("width", 1);
  const int64_t size = opt.atLeast("image_size", 32);
  const int64_t channels = opt.atLeast("channels", 1);
  const int64_t classes = opt.atLeast("classes", 2);
  const int64_t hidden = opt.atLeast("hidden", 1);
  // Five 2x poolings; a size that does not divide would be silently floored away.
  if (size % 32 != 0) opt.fail("config 'image_size' = " + std::to_string(size) + " must be a multiple of 32");

  Model model;
  model.input = {InputKind::kImage, {channels, size, size}, classes};
  const int64_t convs_per_block[] = {2, 2, 3, 3, 3};
  const int64_t block_width[] = {width, 2 * width, 4 * width, 8 * width, 8 * width};
  int64_t in = channels;
  for (int b = 0; b < 5; ++b) {
    for (int64_t i = 0; i < convs_per_block[b]; ++i) {
      nn::Sequential body(nn::Conv2d(nn::Conv2dOptions(in, block_width[b], 3).padding(1)), nn::ReLU());
      // The block's pooling rides with its last conv: stage boundaries then carry the
      // pooled, 4x smaller tensor.
      if (i + 1 == convs_per_block[b]) body->push_back(nn::MaxPool2d(2));
      model.layers.push_back(stackLayer("conv" + std::to_string(b + 1) + "_" + std::to_string(i + 1), "conv", body));
      in = block_width[b];
    }
  }
  const int64_t side = size / 32;  // after five poolings: (N, 8*width, side, side)
  // Dropout is left out: it would make a stage's output depend on the random stream,
  // and pipelined runs could no longer be compared exactly with a single process.
  model.layers.push_back(stackLayer("fc1", "linear",
                                    nn::Sequential(nn::Flatten(), nn::Linear(in * side * side, hidden),
                                                   nn::ReLU())));  // (N, hidden)
  model.layers.push_back(stackLayer("fc2", "linear", nn::Sequential(nn::Linear(hidden, hidden), nn::ReLU())));
  model.layers.push_back(stackLayer("fc3", "linear", nn::Sequential(nn::Linear(hidden, classes))));  // (N, classes)
  return model;
}

// ---------------------------------------------------------------- ResNet-50

namespace {

// conv (+ batch norm when `norm`). Without norm the conv gets a bias, which batch norm
// would otherwise make redundant.
void convNorm(nn::Sequential& seq, int64_t in, int64_t out, int64_t kernel, int64_t stride, bool norm) {
  seq->push_back(nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(!norm)));
  if (norm) seq->push_back(nn::BatchNorm2d(out));
}

// The ResNet v1.5 bottleneck (stride on the 3x3 conv, as torchvision): 1x1 reduce,
// 3x3, 1x1 expand by 4, plus a projection shortcut where the shape changes.
struct BottleneckImpl : nn::Module {
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride, bool norm) {
    convNorm(branch, in, planes, 1, 1, norm);
    branch->push_back(nn::ReLU());
    convNorm(branch, planes, planes, 3, stride, norm);
    branch->push_back(nn::ReLU());
    convNorm(branch, planes, 4 * planes, 1, 1, norm);
    register_module("branch", branch);
    if (stride != 1 || in != 4 * planes) {
      convNorm(shortcut, in, 4 * planes, 1, stride, norm);
      register_module("shortcut", shortcut);
      has_shortcut = true;
    }
  }
  torch::Tensor forward(torch::Tensor x) {  // x: (N, in, H, W)
    torch::Tensor identity = has_shortcut ? shortcut->forward(x) : x;  // (N, 4*planes, H/stride, W/stride)
    return torch::relu(branch->forward(x) + identity);
  }
  nn::Sequential branch;
  nn::Sequential shortcut;
  bool has_shortcut = false;
};
TORCH_MODULE(Bottleneck);

}  // namespace

// NOTE(batch-norm): in training mode batch norm normalises with the statistics of the
// batch it sees. A pipeline feeds each stage one micro-batch at a time, so pipelined
// training equals single-process training run micro-batch by micro-batch (with gradient
// accumulation), not single-process training on the whole mini-batch. Set "norm" = 0 to
// drop batch norm where exact comparisons with a full-batch run are wanted.
Model buildResnet50(const ModelConfig& config) {
  const Options opt("resnet50", config,
                    {{"width", 64}, {"image_size", 224}, {"channels", 3}, {"classes", 10}, {"norm", 1}});
  const int64_t width = opt.atLeast("width", 1);
  const int64_t size = opt.atLeast("image_size", 1);
  const int64_t channels = opt.atLeast("channels", 1);
  const int64_t classes = opt.atLeast("classes", 2);
  const int64_t norm = opt.get("norm");
  if (norm != 0 && norm != 1) opt.fail("config 'norm' = " + std::to_string(norm) + " must be 0 or 1");

  Model model;
  model.input = {InputKind::kImage, {channels, size, size}, classes};
  nn::Sequential stem;
  convNorm(stem, channels, width, 7, 2, norm == 1);  // (N, width, size/2, size/2)
  stem->push_back(nn::ReLU());
  stem->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));  // (N, width, size/4, size/4)
  model.layers.push_back(stackLayer("stem", "conv", stem));

  const int64_t blocks_per_stage[] = {3, 4, 6, 3};
  int64_t in = width;
  int index = 0;
  for (int s = 0; s < 4; ++s) {
    const int64_t planes = width << s;
    for (int64_t i = 0; i < blocks_per_stage[s]; ++i) {
      const int64_t stride = (s > 0 && i == 0) ? 2 : 1;  // each later stage halves H and W once
      model.layers.push_back(Layer{"block" + std::to_string(index++), "residual",
                                   nn::AnyModule(Bottleneck(in, planes, stride, norm == 1))});
      in = 4 * planes;
    }
  }
  model.layers.push_back(stackLayer("head", "linear",
                                    nn::Sequential(nn::AdaptiveAvgPool2d(1), nn::Flatten(),  // (N, 32*width)
                                                   nn::Linear(in, classes))));  // (N, classes)
  return model;
}

}  // namespace pipetrain::models::zoo
