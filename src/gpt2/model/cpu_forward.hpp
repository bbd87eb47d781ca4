// GPT-2's forward pass on the CPU in fp32: learned positional embeddings, pre-LayerNorm blocks
// (x += attn(ln_1(x)); x += mlp(ln_2(x))), GELU (tanh form) MLP, final LayerNorm, LM head tied to
// the token embedding. Matrix products through cblas_sgemm when built with a BLAS, else OpenMP loops;
// attention through the public C API with the chosen implementation.
#pragma once
#include <cstdint>
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

// x = GELU(x) in GPT-2's tanh form; x += y.
void gelu_tanh(float *x, int64_t n);
void add_inplace(float *x, const float *y, int64_t n);

}  // namespace flashbox::gpt2
