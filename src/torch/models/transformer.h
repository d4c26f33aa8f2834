// Internal to the model zoo: the transformer pieces gpt and multimodal share, GPT-2's
// shape (pre-LN) with attention written out in matmuls so every step is visible and
// runs on LibTorch 1.13.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "zoo.h"

namespace pipetrain::models::zoo {

// The sizes every transformer here takes from its options ("layers", "width", "heads",
// "context", "vocab"), checked: an Error names the key unless each is positive, the
// vocabulary has two tokens or more and "heads" divides "width".
struct TransformerSize {
  int64_t layers, width, heads, context, vocab;
};
TransformerSize transformerSize(const Options& opt);

// GPT-2's initialisation: N(0, 0.02) weights, zero biases. `std` lets the residual
// projections be scaled down by 1/sqrt(2 * layers), so the residual stream's variance
// does not grow with depth.
torch::nn::Linear gptLinear(int64_t in, int64_t out, double std = 0.02);

// A linear layer applied as PyTorch's F.linear applies it, through ATen's `linear`: the
// bias folded into the matrix product. LibTorch's nn::Linear multiplies a 3-D input and
// then adds the bias in place, which under autocast adds the fp32 bias into bf16 through
// a generic elementwise kernel, a sizeable share of the 86M gpt's step on an H200
// (measured: docs/gpu.md, "Measured on a lent NVIDIA H200 (2026-12-04)").
inline torch::Tensor applyLinear(const torch::nn::Linear& linear, const torch::Tensor& x) {
  return torch::linear(x, linear->weight, linear->bias);
}

// Token plus learned position embeddings: (N, T) int64 -> (N, T, width), T <= context.
struct EmbedImpl : torch::nn::Module {
  EmbedImpl(int64_t vocab, int64_t context, int64_t width);
  torch::Tensor forward(torch::Tensor tokens);
  torch::nn::Embedding token;
  torch::nn::Embedding position;
};
TORCH_MODULE(Embed);

// A pre-LN block: multi-head self-attention, then a 4x GELU MLP, each with a residual.
// (N, T, width) -> (N, T, width). `causal`: position i attends only to positions <= i
// (a language model); otherwise to every position (an encoder, as in a classifier).
// `layers` is the model's depth, which scales the residual projections' initialisation.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t width, int64_t heads, int64_t layers, bool causal);
  torch::Tensor attention(const torch::Tensor& x);
  torch::Tensor forward(torch::Tensor x);

  int64_t heads;
  bool causal;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc, fc_proj;
};
TORCH_MODULE(Block);

}  // namespace pipetrain::models::zoo
