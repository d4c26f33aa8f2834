// multimodal: k transformer branches, one per modality, fused by an MLP head.
//
// The input holds k token streams of `context` tokens side by side, one per modality:
// (N, k x context) int64 with one class label per sample (InputKind::kIndices). Branch i
// reads stream i (tokens [i x context, (i + 1) x context)) with a token and position
// embedding of its own, runs `layers` bidirectional transformer blocks (transformer.h;
// a classifier sees the whole stream) and pools them to (N, width); the fusion layer
// concatenates the k pooled features, and the head turns them into class scores.
//
// Layers, branch by branch: b{i}_embed, b{i}_block0 .. b{i}_block{L-1}, b{i}_pool, then
// fusion (reads every b{i}_pool) and head.
#include "transformer.h"
#include "zoo.h"

namespace pipetrain::models::zoo {

namespace nn = torch::nn;

namespace {

// LayerNorm, then the mean over positions: (N, T, width) -> (N, width), the small
// tensor a branch hands to the fusion layer.
struct PoolImpl : nn::Module {
  explicit PoolImpl(int64_t width) : ln(register_module("ln", nn::LayerNorm(nn::LayerNormOptions({width})))) {}
  torch::Tensor forward(torch::Tensor x) { return ln->forward(x).mean(1); }
  nn::LayerNorm ln;
};
TORCH_MODULE(Pool);

}  // namespace

Model buildMultimodal(const ModelConfig& config) {
  const Options opt("multimodal", config,
                    {{"branches", 4}, {"layers", 2}, {"width", 64}, {"heads", 4}, {"context", 16}, {"vocab", 256},
                     {"classes", 10}});
  const int64_t branches = opt.atLeast("branches", 1);
  const auto [layers, width, heads, context, vocab] = transformerSize(opt);
  const int64_t classes = opt.atLeast("classes", 2);

  Model model;
  model.input = {InputKind::kIndices, {branches * context}, classes, LossKind::kCrossEntropy, vocab};
  std::vector<std::string> pooled;
  for (int64_t b = 0; b < branches; ++b) {
    const std::string branch = "b" + std::to_string(b) + "_";
    model.layers.push_back(stackLayer(branch + "embed", "embedding",
                                      nn::Sequential(Columns(b * context, context),  // (N, context)
                                                     Embed(vocab, context, width)),  // (N, context, width)
                                      {kModelInput}));
    for (int64_t i = 0; i < layers; ++i) {
      model.layers.push_back(Layer{branch + "block" + std::to_string(i), "transformer_block",
                                   nn::AnyModule(Block(width, heads, layers, /*causal=*/false))});
    }
    model.layers.push_back(Layer{branch + "pool", "pool", nn::AnyModule(Pool(width))});  // (N, width)
    pooled.push_back(model.layers.back().name);
  }
  addFusionHead(model, pooled, branches * width, width, classes);  // (N, branches x width) -> (N, classes)
  return model;
}

}  // namespace pipetrain::models::zoo
