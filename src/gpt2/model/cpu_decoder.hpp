// GPT-2 decoding on the CPU with a KV cache: the prompt is fed once (a prefill), then one token at a
// time; each layer keeps its keys and values in a [capacity, heads, head_dim] cache that
// flashbox_attention_kvcache appends to and attends over (causal, bottom-right), so a step costs
// one token's work instead of the window's. The logits of each fed position equal CpuGpt2's
// full-window forward at that position (tests/gpt2/decoder_test.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "gpt2/model/weights.hpp"

namespace flashbox::gpt2 {

class CpuGpt2Decoder {
 public:
  // capacity: the most positions the caches hold (at most the model's n_ctx).
  CpuGpt2Decoder(const Gpt2Weights &w, int capacity);

  // Feeds n >= 1 tokens at positions length() .. length() + n - 1 and returns the logits [vocab] of
  // the last one. Throws Gpt2Error when the caches would overflow or a token is out of range.
  const std::vector<float> &feed(const int32_t *tokens, int n);
  int length() const { return length_; }

 private:
  const Gpt2Weights &w_;
  int capacity_, length_ = 0;
  std::vector<std::vector<float>> k_cache_, v_cache_;  // per layer [capacity, heads, head_dim]
  std::vector<float> x_, ln_, qkv_, att_, fc_, logits_;
};

}  // namespace flashbox::gpt2
