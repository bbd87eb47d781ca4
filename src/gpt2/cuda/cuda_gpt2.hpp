// GPT-2's forward pass on CUDA (src/gpt2/cuda/*.cu): bf16 weights and activations, fp32 accumulation
// and an fp32 residual stream; cuBLASLt for the matrix products (bias fused as an epilogue, the
// residual add fused as beta = 1), own kernels for the embedding, LayerNorm, GELU and the softmax
// cross-entropy; attention through flashbox_attention_forward (device CUDA, bf16) on strided views
// into the qkv activation. B windows of T tokens run at once. Plain C++ interface: no CUDA types.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "flashbox/flashbox.h"
#include "gpt2/model/weights.hpp"

namespace flashbox::gpt2 {

class CudaGpt2 {
 public:
  // Uploads the weights (bf16) and allocates activations for `batch` windows of `seqlen`.
  // Throws Gpt2Error when there is no GPU, memory runs out, or a CUDA call fails.
  CudaGpt2(const Gpt2Weights &w, int batch, int seqlen);
  ~CudaGpt2();
  CudaGpt2(const CudaGpt2 &) = delete;
  CudaGpt2 &operator=(const CudaGpt2 &) = delete;

  // Uploads the tokens of `windows` windows (windows * seqlen ids, checked against the vocabulary).
  void set_tokens(const std::vector<int32_t> &tokens, int64_t windows);
  // Sum of next-token cross-entropies over every window set by set_tokens ((seqlen - 1) targets each),
  // evaluated `batch` windows at a time; returns after the GPU has finished. `progress`, when set, is
  // called after each batch with (windows done, windows in total). max_windows > 0 evaluates only
  // the first max_windows windows (a warm-up).
  double loss_sum(flashbox_impl impl, const std::function<void(int64_t, int64_t)> &progress = {},
                  int64_t max_windows = 0);
  // Logits [T, V] (fp32) of the first window set by set_tokens, for tests.
  std::vector<float> first_window_logits(flashbox_impl impl);

  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace flashbox::gpt2
