// A byte-level, decoder-only transformer (GPT-2 shape, pre-LN), with attention written
// out in matmuls so every step is visible and runs on LibTorch 1.13.
#include <cmath>
#include <limits>

#include "zoo.h"

namespace pipetrain::models::zoo {

namespace nn = torch::nn;

namespace {

// GPT-2's initialisation: N(0, 0.02) weights, zero biases. `std` lets the residual
// projections be scaled down by 1/sqrt(2 * layers), so the residual stream's variance
// does not grow with depth.
nn::Linear gptLinear(int64_t in, int64_t out, double std = 0.02) {
  nn::Linear linear(in, out);
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, std);
  linear->bias.zero_();
  return linear;
}

struct EmbedImpl : nn::Module {
  EmbedImpl(int64_t vocab, int64_t context, int64_t width)
      : token(register_module("token", nn::Embedding(vocab, width))),
        position(register_module("position", nn::Embedding(context, width))) {
    torch::NoGradGuard no_grad;
    token->weight.normal_(0.0, 0.02);
    position->weight.normal_(0.0, 0.02);
  }
  torch::Tensor forward(torch::Tensor tokens) {  // (N, T) int64
    const int64_t t = tokens.size(1);
    TORCH_CHECK(t <= position->weight.size(0), "gpt: sequence of ", t, " tokens is longer than the context");
    torch::Tensor positions = torch::arange(t, tokens.options());  // (T)
    return token->forward(tokens) + position->forward(positions);  // (N, T, C) + (T, C)
  }
  nn::Embedding token;
  nn::Embedding position;
};
TORCH_MODULE(Embed);

struct BlockImpl : nn::Module {
  BlockImpl(int64_t width, int64_t heads, int64_t layers)
      : heads(heads),
        ln1(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({width})))),
        qkv(register_module("qkv", gptLinear(width, 3 * width))),
        proj(register_module("proj", gptLinear(width, width, 0.02 / std::sqrt(2.0 * layers)))),
        ln2(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({width})))),
        fc(register_module("fc", gptLinear(width, 4 * width))),
        fc_proj(register_module("fc_proj", gptLinear(4 * width, width, 0.02 / std::sqrt(2.0 * layers)))) {}

  torch::Tensor attention(const torch::Tensor& x) {  // (N, T, C)
    const int64_t n = x.size(0), t = x.size(1), c = x.size(2), d = c / heads;
    std::vector<torch::Tensor> parts = qkv->forward(x).split(c, 2);  // 3 x (N, T, C)
    auto toHeads = [&](const torch::Tensor& y) { return y.view({n, t, heads, d}).transpose(1, 2); };
    torch::Tensor q = toHeads(parts[0]), k = toHeads(parts[1]), v = toHeads(parts[2]);  // (N, H, T, D)
    torch::Tensor scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(d));  // (N, H, T, T)
    // Causal: position i may only attend to positions <= i. The mask is rebuilt per call
    // (T x T booleans, cheap) rather than stored, so it is neither a parameter nor state.
    torch::Tensor future = torch::ones({t, t}, x.options().dtype(torch::kBool)).triu(1);  // (T, T)
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    torch::Tensor y = torch::matmul(torch::softmax(scores, -1), v);  // (N, H, T, D)
    return proj->forward(y.transpose(1, 2).contiguous().view({n, t, c}));  // (N, T, C)
  }

  torch::Tensor forward(torch::Tensor x) {  // (N, T, C)
    x = x + attention(ln1->forward(x));
    return x + fc_proj->forward(torch::gelu(fc->forward(ln2->forward(x))));  // (N, T, C)
  }

  int64_t heads;
  nn::LayerNorm ln1;
  nn::Linear qkv, proj;
  nn::LayerNorm ln2;
  nn::Linear fc, fc_proj;
};
TORCH_MODULE(Block);

struct HeadImpl : nn::Module {
  HeadImpl(int64_t width, int64_t vocab)
      : ln(register_module("ln", nn::LayerNorm(nn::LayerNormOptions({width})))),
        out(register_module("out", gptLinear(width, vocab))) {}
  torch::Tensor forward(torch::Tensor x) { return out->forward(ln->forward(x)); }  // (N, T, C) -> (N, T, V)
  nn::LayerNorm ln;
  nn::Linear out;
};
TORCH_MODULE(Head);

}  // namespace

Model buildGpt(const ModelConfig& config) {
  const Options opt("gpt", config, {{"layers", 4}, {"width", 128}, {"heads", 4}, {"context", 64}, {"vocab", 256}});
  const int64_t layers = opt.atLeast("layers", 1);
  const int64_t width = opt.atLeast("width", 1);
  const int64_t heads = opt.atLeast("heads", 1);
  const int64_t context = opt.atLeast("context", 1);
  const int64_t vocab = opt.atLeast("vocab", 2);
  if (width % heads != 0) {
    opt.fail("config 'width' = " + std::to_string(width) + " must be a multiple of 'heads' = " + std::to_string(heads));
  }

  Model model;
  model.input = {InputKind::kTokens, {context}, vocab};
  model.layers.push_back(Layer{"embed", "embedding", nn::AnyModule(Embed(vocab, context, width))});
  for (int64_t i = 0; i < layers; ++i) {
    model.layers.push_back(
        Layer{"block" + std::to_string(i), "transformer_block", nn::AnyModule(Block(width, heads, layers))});
  }
  // The head has its own output matrix: tying it to the embedding would make the first
  // and last stages share a parameter across ranks.
  model.layers.push_back(Layer{"head", "linear", nn::AnyModule(Head(width, vocab))});
  return model;
}

}  // namespace pipetrain::models::zoo
