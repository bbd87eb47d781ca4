// GPT-2's forward pass on the CPU in fp32: learned positional embeddings, pre-LayerNorm blocks
// (x += attn(ln_1(x)); x += mlp(ln_2(x))), GELU (tanh form) MLP, final LayerNorm, LM head tied to
// the token embedding. Matrix products through cblas_sgemm when built with a BLAS, else OpenMP loops;
// attention through the public C API with the chosen implementation.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "flashbox/flashbox.h"
#include "gpt2/model/weights.hpp"

namespace flashbox::gpt2 {

class CpuGpt2 {
 public:
  explicit CpuGpt2(const Gpt2Weights &w) : w_(w) {}

  // Logits [T, V] of one window of T tokens.
  std::vector<float> logits(const int32_t *tokens, int T, flashbox_impl impl);
  // Sum of next-token cross-entropies inside each of B windows of T tokens: B * (T - 1) targets.
  double loss_sum(const int32_t *tokens, int B, int T, flashbox_impl impl);

 private:
  // Runs embeddings, blocks and ln_f; leaves the normalised final states [B*T, C] in ln_.
  void trunk(const int32_t *tokens, int B, int T, flashbox_impl impl);

  const Gpt2Weights &w_;
  std::vector<float> x_, ln_, qkv_, att_, fc_, logits_;
};

// y[M, N] = x[M, K] W[N, K]^T (+ b[N]): a layer with weights stored [out, in].
void linear_forward(const float *x, const float *W, const float *b, int64_t M, int64_t K, int64_t N, float *y);
// y[M, C] = LN(x) * w + b over each row (GPT-2's epsilon 1e-5); each row's mean and 1/std also go to
// mean_out and rstd_out where they are set (the CPU trainer keeps them for the backward).
void layernorm(const float *x, const float *w, const float *b, int64_t M, int64_t C, float *y,
               float *mean_out = nullptr, float *rstd_out = nullptr);

// x[rows, C] = token embedding + positional embedding; row m of a window of `window` rows sits at
// position first_position + m % window. Throws Gpt2Error for a token outside the vocabulary.
void embed_tokens(const Gpt2Weights &w, const int32_t *tokens, int64_t rows, int64_t window, int64_t first_position,
                  float *x);
// Block l on the residual stream x [M, C], in place: x += attn(ln_1(x)); x += mlp(ln_2(x)).
// `attend(qkv, att)` writes the attention of qkv [M, 3C] into att [M, C] (the only part the full-window
// forward and the KV-cache decoder do differently); ln, qkv, att, fc are scratch of [M, C], [M, 3C],
// [M, C], [M, 4C].
void block_forward(const Gpt2Weights &w, int l, int64_t M, float *x, float *ln, float *qkv, float *att, float *fc,
                   const std::function<void(const float *qkv, float *att)> &attend);

}  // namespace flashbox::gpt2
