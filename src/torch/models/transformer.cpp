// The transformer pieces of transformer.h.
#include "transformer.h"

#include <cmath>
#include <limits>

namespace pipetrain::models::zoo {

namespace nn = torch::nn;

TransformerSize transformerSize(const Options& opt) {
  TransformerSize size{opt.atLeast("layers", 1), opt.atLeast("width", 1), opt.atLeast("heads", 1),
                       opt.atLeast("context", 1), opt.atLeast("vocab", 2)};
  if (size.width % size.heads != 0)
    opt.fail("config 'width' = " + std::to_string(size.width) + " must be a multiple of 'heads' = " +
             std::to_string(size.heads));
  return size;
}

nn::Linear gptLinear(int64_t in, int64_t out, double std) {
  nn::Linear linear(in, out);
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, std);
  linear->bias.zero_();
  return linear;
}

EmbedImpl::EmbedImpl(int64_t vocab, int64_t context, int64_t width)
    : token(register_module("token", nn::Embedding(vocab, width))),
      position(register_module("position", nn::Embedding(context, width))) {
  torch::NoGradGuard no_grad;
  token->weight.normal_(0.0, 0.02);
  position->weight.normal_(0.0, 0.02);
}

torch::Tensor EmbedImpl::forward(torch::Tensor tokens) {  // (N, T) int64
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= position->weight.size(0), "sequence of ", t, " tokens is longer than the context");
  torch::Tensor positions = torch::arange(t, tokens.options());  // (T)
  return token->forward(tokens) + position->forward(positions);  // (N, T, C) + (T, C)
}

BlockImpl::BlockImpl(int64_t width, int64_t heads, int64_t layers, bool causal)
    : heads(heads),
      causal(causal),
      ln1(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({width})))),
      qkv(register_module("qkv", gptLinear(width, 3 * width))),
      proj(register_module("proj", gptLinear(width, width, 0.02 / std::sqrt(2.0 * layers)))),
      ln2(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({width})))),
      fc(register_module("fc", gptLinear(width, 4 * width))),
      fc_proj(register_module("fc_proj", gptLinear(4 * width, width, 0.02 / std::sqrt(2.0 * layers)))) {}

torch::Tensor BlockImpl::attention(const torch::Tensor& x) {  // (N, T, C)
  const int64_t n = x.size(0), t = x.size(1), c = x.size(2), d = c / heads;
  std::vector<torch::Tensor> parts = applyLinear(qkv, x).split(c, 2);  // 3 x (N, T, C)
  auto toHeads = [&](const torch::Tensor& y) { return y.view({n, t, heads, d}).transpose(1, 2); };
  torch::Tensor q = toHeads(parts[0]), k = toHeads(parts[1]), v = toHeads(parts[2]);  // (N, H, T, D)
  // PyTorch's fused attention: on a GPU a flash-attention kernel that never holds the
  // (T, T) scores (at context 1024 they would be most of a block's activations), on the
  // CPU its own fused kernel. Causal: position i attends to positions <= i.
  torch::Tensor y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                     /*is_causal=*/causal);  // (N, H, T, D)
  return applyLinear(proj, y.transpose(1, 2).contiguous().view({n, t, c}));  // (N, T, C)
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {  // (N, T, C)
  x = x + attention(ln1->forward(x));
  return x + applyLinear(fc_proj, torch::gelu(applyLinear(fc, ln2->forward(x))));  // (N, T, C)
}

}  // namespace pipetrain::models::zoo
