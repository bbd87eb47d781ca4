// The extension's fp8 e4m3 forward on the cpu (flashbox_attention_ext: out_dtype, q/k/v_descale):
// q, k and v are dequantized into dense fp32 copies, element by element,
//   x_real = float(x_e4m3) * descale[b, kv head]   (query head h: kv head h / (heads_q / heads_kv)),
// b the batch entry or, with cu_seqlens, the sequence of the packed row; then the call runs as an fp32
// call of the same extension (masks, transforms, varlen, seqused, splits: src/cpu/varlen_attention.cpp)
// into a dense fp32 o, and the query rows that call writes are rounded into o in out_dtype (rows past
// seqused_q keep what they held). lse is fp32 and written in place. The arguments were validated by
// src/api/fp8_args.hpp (descales finite and >= 0, out_dtype bf16 or fp16).
#include <cstdint>
#include <string>
#include <vector>

#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/float8.hpp"
#include "cpu/masked_levels.hpp"

namespace flashbox::detail {
namespace {

// The packed rows of the call: fixed length, batch entry b owns rows [b * seq, (b + 1) * seq) of the
// dense copies; varlen, sequence s owns [cu[s], cu[s + 1]).
struct Rows {
  const int32_t *cu;  // null: fixed length
  int64_t batch, seq;
  int64_t begin(int64_t b) const { return cu ? cu[b] : b * seq; }
  int64_t end(int64_t b) const { return cu ? cu[b + 1] : (b + 1) * seq; }
  // Row r's offset in the caller's tensor (stride[0]: batch entry, stride[1]: token).
  int64_t offset(const int64_t *stride, int64_t b, int64_t r) const {
    return cu ? r * stride[1] : b * stride[0] + (r - b * seq) * stride[1];
  }
};

// A dense fp32 [rows, heads, d] copy of an e4m3 tensor, head h scaled by descale (b, h / group) (null:
// 1.0).
std::vector<float> dequantize(const void *x, const int64_t *stride, const Rows &rows, int64_t heads, int64_t d,
                              int64_t group, const float *descale, const int64_t *ds) {
  const auto *bytes = static_cast<const uint8_t *>(x);
  std::vector<float> out(size_t(rows.end(rows.batch - 1) * heads * d));
  for (int64_t b = 0; b < rows.batch; ++b)
    for (int64_t r = rows.begin(b); r < rows.end(b); ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const float scale = descale ? descale[b * ds[0] + (h / group) * ds[1]] : 1.0f;
        const uint8_t *src = bytes + rows.offset(stride, b, r) + h * stride[2];
        float *dst = out.data() + (r * heads + h) * d;
        for (int64_t c = 0; c < d; ++c) dst[c] = core::e4m3_to_float(src[c]) * scale;
      }
  return out;
}

void dense_strides(int64_t seq, int64_t heads, int64_t d, int64_t *stride) {
  stride[0] = seq * heads * d, stride[1] = heads * d, stride[2] = d;
}

}  // namespace

int cpu_forward_fp8(const flashbox_attention_args &a, const flashbox_attention_ext &e, const core::ScoreMods &mods) {
  const bool varlen = e.cu_seqlens_q && e.cu_seqlens_k;
  const int64_t d = a.head_dim, dv = e.head_dim_v ? e.head_dim_v : a.head_dim, group = a.heads_q / a.heads_kv;
  const Rows rq{varlen ? e.cu_seqlens_q : nullptr, a.batch, a.seqlen_q};
  const Rows rk{varlen ? e.cu_seqlens_k : nullptr, a.batch, a.seqlen_k};
  const std::vector<float> q = dequantize(a.q, a.q_stride, rq, a.heads_q, d, group, e.q_descale, e.q_descale_stride);
  const std::vector<float> k = dequantize(a.k, a.k_stride, rk, a.heads_kv, d, 1, e.k_descale, e.k_descale_stride);
  const std::vector<float> v = dequantize(a.v, a.v_stride, rk, a.heads_kv, dv, 1, e.v_descale, e.v_descale_stride);
  std::vector<float> o(size_t(rq.end(a.batch - 1) * a.heads_q * dv));

  flashbox_attention_args x = a;
  x.dtype = FLASHBOX_FLOAT32;
  x.q = q.data(), x.k = k.data(), x.v = v.data(), x.o = o.data();
  dense_strides(a.seqlen_q, a.heads_q, d, x.q_stride);
  dense_strides(a.seqlen_k, a.heads_kv, d, x.k_stride);
  dense_strides(a.seqlen_k, a.heads_kv, dv, x.v_stride);
  dense_strides(a.seqlen_q, a.heads_q, dv, x.o_stride);
  flashbox_attention_ext y = e;
  y.out_dtype = FLASHBOX_FLOAT32;
  y.q_descale = y.k_descale = y.v_descale = nullptr;
  if (int rc = cpu_forward_ext(x, y, mods)) return rc;

  // The rows the fp32 call wrote: each sequence's first seqused_q (or all of its rows).
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t r0 = rq.begin(b), used = e.seqused_q ? e.seqused_q[b] : rq.end(b) - r0;
    for (int64_t r = r0; r < r0 + used; ++r)
      for (int64_t h = 0; h < a.heads_q; ++h)
        cpu::store_row_from_float(a.o, e.out_dtype, rq.offset(a.o_stride, b, r) + h * a.o_stride[2], dv,
                                  o.data() + (r * a.heads_q + h) * dv);
  }
  set_kernel_name(std::string(kernel_name()) + "_fp8e4m3");
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
