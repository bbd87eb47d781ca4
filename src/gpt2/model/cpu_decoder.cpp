#include "gpt2/model/cpu_decoder.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "gpt2/error.hpp"
#include "gpt2/model/cpu_forward.hpp"

namespace flashbox::gpt2 {

CpuGpt2Decoder::CpuGpt2Decoder(const Gpt2Weights &w, int capacity) : w_(w), capacity_(capacity) {
  const Gpt2Config &c = w.config();
  if (capacity < 1 || capacity > c.n_ctx)
    throw Gpt2Error(fmt::format("a KV cache of {} positions does not fit the model's context of {}", capacity,
                                c.n_ctx));
  k_cache_.assign(size_t(c.n_layer), std::vector<float>(size_t(capacity) * size_t(c.n_embd)));
  v_cache_ = k_cache_;
}

const std::vector<float> &CpuGpt2Decoder::feed(const int32_t *tokens, int n) {
  const Gpt2Config &c = w_.config();
  const int64_t C = c.n_embd, H = c.n_head, D = c.head_dim();
  if (n < 1 || length_ + n > capacity_)
    throw Gpt2Error(fmt::format("feeding {} tokens after {} overflows the KV cache of {} positions", n, length_,
                                capacity_));
  x_.resize(size_t(n * C)), ln_.resize(size_t(n * C)), qkv_.resize(size_t(n * 3 * C));
  att_.resize(size_t(n * C)), fc_.resize(size_t(n * 4 * C));
  embed_tokens(w_, tokens, n, n, length_, x_.data());
  const int32_t cache_len = length_;
  for (int l = 0; l < c.n_layer; ++l) {
    // q, k_new and v_new are column slices of qkv [n, 3C]: [1, n, H, D] views with row stride 3C.
    const auto attend = [&](const float *qkv, float *att) {
      flashbox_kvcache_args a{};
      a.struct_size = int32_t(sizeof a);
      a.device = FLASHBOX_CPU, a.dtype = FLASHBOX_FLOAT32;
      a.batch = 1, a.seqlen_q = n, a.heads_q = H, a.heads_kv = H, a.head_dim = D;
      a.q = qkv;
      a.k_new = qkv + C, a.v_new = qkv + 2 * C, a.seqlen_new = n;
      for (int64_t *s : {a.q_stride, a.k_new_stride, a.v_new_stride}) s[0] = n * 3 * C, s[1] = 3 * C, s[2] = D;
      a.k_cache = k_cache_[size_t(l)].data(), a.v_cache = v_cache_[size_t(l)].data();
      for (int64_t *s : {a.k_cache_stride, a.v_cache_stride}) s[0] = capacity_ * C, s[1] = C, s[2] = D;
      a.cache_entries = 1, a.cache_rows = capacity_;
      a.cache_seqlens = &cache_len;
      a.o = att;
      a.o_stride[0] = n * C, a.o_stride[1] = C, a.o_stride[2] = D;
      a.causal = 1;
      if (int rc = flashbox_attention_kvcache(&a))
        throw Gpt2Error(fmt::format("attention (KV cache) failed ({}): {}", rc, flashbox_last_error()));
    };
    block_forward(w_, l, n, x_.data(), ln_.data(), qkv_.data(), att_.data(), fc_.data(), attend);
  }
  length_ += n;
  // The last position's final LayerNorm and LM head (tied to the token embedding).
  const float *last = x_.data() + (n - 1) * C;
  layernorm(last, w_.tensor(Param::LnfW).data(), w_.tensor(Param::LnfB).data(), 1, C, ln_.data());
  logits_.resize(size_t(c.vocab_size));
  linear_forward(ln_.data(), w_.tensor(Param::Wte).data(), nullptr, 1, C, c.vocab_size, logits_.data());
  return logits_;
}

}  // namespace flashbox::gpt2
