// A byte-level, decoder-only transformer (GPT-2 shape, pre-LN; the blocks are in
// transformer.cpp).
#include "transformer.h"
#include "zoo.h"

namespace pipetrain::models::zoo {

namespace nn = torch::nn;

namespace {

struct HeadImpl : nn::Module {
  HeadImpl(int64_t width, int64_t vocab)
      : ln(register_module("ln", nn::LayerNorm(nn::LayerNormOptions({width})))),
        out(register_module("out", gptLinear(width, vocab))) {}
  torch::Tensor forward(torch::Tensor x) { return applyLinear(out, ln->forward(x)); }  // (N, T, C) -> (N, T, V)
  nn::LayerNorm ln;
  nn::Linear out;
};
TORCH_MODULE(Head);

}  // namespace

Model buildGpt(const ModelConfig& config) {
  const Options opt("gpt", config, {{"layers", 4}, {"width", 128}, {"heads", 4}, {"context", 64}, {"vocab", 256}});
  const auto [layers, width, heads, context, vocab] = transformerSize(opt);

  Model model;
  model.input = {InputKind::kTokens, {context}, vocab};
  model.layers.push_back(Layer{"embed", "embedding", nn::AnyModule(Embed(vocab, context, width))});
  for (int64_t i = 0; i < layers; ++i) {
    model.layers.push_back(
        Layer{"block" + std::to_string(i), "transformer_block", nn::AnyModule(Block(width, heads, layers, /*causal=*/true))});
  }
  // The head has its own output matrix: tying it to the embedding would make the first
  // and last stages share a parameter across ranks.
  model.layers.push_back(Layer{"head", "linear", nn::AnyModule(Head(width, vocab))});
  return model;
}

}  // namespace pipetrain::models::zoo
