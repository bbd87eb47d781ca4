#include "report/attention_shape.hpp"

#include "core/dtype.hpp"
#include "report/random_fill.hpp"

#include <fmt/core.h>

#include <stdexcept>

namespace flashbox::report {

int64_t AttentionShape::q_bytes() const { return q_elements() * cpu::dtype_size(dtype); }
int64_t AttentionShape::kv_bytes() const { return kv_elements() * cpu::dtype_size(dtype); }

double AttentionShape::forward_flops() const {
  const double full = 4.0 * double(batch) * double(heads_q) * double(seqlen_q) * double(seqlen_k) * double(head_dim);
  return causal ? full / 2 : full;
}

void validate(const AttentionShape &s) {
  const std::pair<const char *, int64_t> sizes[] = {{"batch", s.batch},       {"seqlen_q", s.seqlen_q},
                                                    {"seqlen_k", s.seqlen_k}, {"heads_q", s.heads_q},
                                                    {"heads_kv", s.heads_kv}, {"head_dim", s.head_dim}};
  for (const auto &[name, value] : sizes)
    if (value <= 0) throw std::invalid_argument(fmt::format("{} must be > 0, got {}", name, value));
  if (s.heads_q % s.heads_kv != 0)
    throw std::invalid_argument(fmt::format("heads ({}) must be a multiple of heads_kv ({})", s.heads_q, s.heads_kv));
}

flashbox_attention_args make_args(const AttentionShape &s, flashbox_device device, flashbox_impl impl, const void *q,
                                  const void *k, const void *v, void *o, float *lse) {
  flashbox_attention_args a{};
  a.device = device;
  a.dtype = s.dtype;
  a.impl = impl;
  a.batch = s.batch;
  a.seqlen_q = s.seqlen_q;
  a.seqlen_k = s.seqlen_k;
  a.heads_q = s.heads_q;
  a.heads_kv = s.heads_kv;
  a.head_dim = s.head_dim;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  const int64_t q_stride[3] = {s.seqlen_q * s.heads_q * s.head_dim, s.heads_q * s.head_dim, s.head_dim};
  const int64_t kv_stride[3] = {s.seqlen_k * s.heads_kv * s.head_dim, s.heads_kv * s.head_dim, s.head_dim};
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = a.o_stride[i] = q_stride[i];
    a.k_stride[i] = a.v_stride[i] = kv_stride[i];
  }
  a.softmax_scale = 0.0f;
  a.causal = s.causal ? 1 : 0;
  a.stream = nullptr;
  return a;
}

HostAttention::HostAttention(const AttentionShape &s, uint64_t seed)
    : shape((validate(s), s)),
      q(size_t(s.q_bytes())),
      k(size_t(s.kv_bytes())),
      v(size_t(s.kv_bytes())),
      o(size_t(s.q_bytes())),
      lse(size_t(s.lse_elements())) {
  fill_random_normal(q.data(), s.dtype, s.q_elements(), seed, 0);
  fill_random_normal(k.data(), s.dtype, s.kv_elements(), seed, 1);
  fill_random_normal(v.data(), s.dtype, s.kv_elements(), seed, 2);
}

flashbox_attention_args HostAttention::args(flashbox_impl impl) {
  return make_args(shape, FLASHBOX_CPU, impl, q.data(), k.data(), v.data(), o.data(), lse.data());
}

}  // namespace flashbox::report
