#include "gpt2/model/attention_call.hpp"

#include <fmt/format.h>

#include "gpt2/error.hpp"

namespace flashbox::gpt2 {

flashbox_attention_args qkv_attention_args(flashbox_device device, flashbox_dtype dtype, flashbox_impl impl,
                                           const void *qkv, void *out, int batch, int seqlen, int heads, int channels) {
  const int64_t C = channels, elem = dtype == FLASHBOX_FLOAT32 ? 4 : 2;
  const char *base = static_cast<const char *>(qkv);
  flashbox_attention_args a{};
  a.device = device;
  a.dtype = dtype;
  a.impl = impl;
  a.batch = batch;
  a.seqlen_q = a.seqlen_k = seqlen;
  a.heads_q = a.heads_kv = heads;
  a.head_dim = C / heads;
  // Row t of window b holds [q | k | v], each C = heads * head_dim wide.
  a.q = base;
  a.k = base + C * elem;
  a.v = base + 2 * C * elem;
  a.o = out;
  for (int64_t *s : {a.q_stride, a.k_stride, a.v_stride}) {
    s[0] = int64_t(seqlen) * 3 * C;
    s[1] = 3 * C;
    s[2] = a.head_dim;
  }
  a.o_stride[0] = int64_t(seqlen) * C;
  a.o_stride[1] = C;
  a.o_stride[2] = a.head_dim;
  a.lse = nullptr;
  a.softmax_scale = 0.0f;  // 1/sqrt(head_dim)
  a.causal = 1;
  a.stream = nullptr;
  return a;
}

void call_attention(const flashbox_attention_args &args) {
  if (const int rc = flashbox_attention_forward(&args); rc != FLASHBOX_OK)
    throw Gpt2Error(fmt::format("attention '{}' on {} failed (code {}): {}", flashbox_impl_name(args.impl),
                                args.device == FLASHBOX_CUDA ? "cuda" : "cpu", rc, flashbox_last_error()));
}

}  // namespace flashbox::gpt2
