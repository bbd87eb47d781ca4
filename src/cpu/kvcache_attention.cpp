// KV-cache attention on the CPU (device = cpu): appends k_new/v_new into the cache, then one query row
// at a time: scores over the visible keys in fp32, softmax with the row max subtracted, P*V, LSE.
// A learnable sink joins the row's max and sum after the keys (cpu/sink_fold.hpp: one more exp in
// the denominator, no value), so a row that sees no key gets o = 0 and lse = the sink.
// An e4m3 cache (cache_dtype) is dequantized exactly on load, float(e4m3) * descale[b, g] in fp32
// (one rounding of the product), and appends are quantized on write (kvcache_rules.hpp: x / descale,
// round to nearest even, saturated to +-448; descale 0 writes 0).
// qv (the absorbed MLA form) adds qv . v to each score, head_dim_v sizes V and O, and
// attention_chunk cuts each row's keys to its chunk (core/masks.hpp's rule on positions counted from
// cache_leftpad, as FlashAttention-3 counts them).
// Parallel over (batch, query head) with OpenMP. Not a fast path; the reference semantics in code
// that runs everywhere, and the implementation behind device = cpu.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kvcache_backends.hpp"
#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/kvcache_rules.hpp"
#include "core/masks.hpp"
#include "cpu/sink_fold.hpp"

namespace flashbox::detail {
namespace {

int64_t kvcache_offset(kvcache::CacheSlot slot, int64_t h, const int64_t *s) {
  return kvcache::cache_offset(slot, h, s[0], s[1], s[2]);
}

kvcache::CacheSlot slot_of(const flashbox_kvcache_args &a, int64_t b, int64_t j) {
  return kvcache::cache_slot(a.block_table, a.block_table_stride, a.cache_rows, a.cache_entries, a.cache_batch_idx, b,
                             j);
}

// Turns the first rotary_dim elements of `x` (fp32) to position `pos` (kvcache::rotary_pair).
void rotate(const flashbox_kvcache_args &a, float *x, int64_t pos) {
  const int64_t half = a.rotary_dim / 2;
  for (int64_t m = 0; m < half; ++m) {
    int64_t i0, i1;
    kvcache::rotary_pair(m, a.rotary_dim, a.rotary_interleaved != 0, i0, i1);
    const float c = cpu::load_as_float(a.rotary_cos, a.dtype, pos * half + m);
    const float s = cpu::load_as_float(a.rotary_sin, a.dtype, pos * half + m);
    const float x0 = x[i0], x1 = x[i1];
    const float c0 = x0 * c, s1 = x1 * s, s0 = x0 * s, c1 = x1 * c;  // no fused multiply-add
    x[i0] = c0 - s1;
    x[i1] = s0 + c1;
  }
}

flashbox_dtype cache_dtype(const flashbox_kvcache_args &a) {
  return a.cache_dtype == FLASHBOX_FLOAT8_E4M3 ? FLASHBOX_FLOAT8_E4M3 : a.dtype;
}

float k_descale(const flashbox_kvcache_args &a, int64_t b, int64_t g) {
  return kvcache::descale_at(a.k_descale, a.k_descale_stride[0], a.k_descale_stride[1], b, g);
}
float v_descale(const flashbox_kvcache_args &a, int64_t b, int64_t g) {
  return kvcache::descale_at(a.v_descale, a.v_descale_stride[0], a.v_descale_stride[1], b, g);
}

// One new row (dtype) into an e4m3 cache row: e4m3(x / descale), 0 for a descale of 0.
void quantize_row(const flashbox_kvcache_args &a, const void *src, int64_t src_off, void *dst, int64_t dst_off,
                  float descale) {
  uint8_t *out = static_cast<uint8_t *>(dst) + dst_off;
  for (int64_t x = 0; x < a.head_dim; ++x) {
    const float v = cpu::load_as_float(src, a.dtype, src_off + x);
    out[x] = core::float_to_e4m3(descale == 0.f ? 0.f : v / descale, core::Overflow::saturate);
  }
}

void append_new_keys(const flashbox_kvcache_args &a) {
  const int64_t d = a.head_dim, dv = a.head_dim_v != 0 ? a.head_dim_v : a.head_dim;
  const bool fp8 = cache_dtype(a) == FLASHBOX_FLOAT8_E4M3;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.seqlen_new; ++i) {
      const int64_t j = int64_t(a.cache_seqlens[b]) + i;
      for (int64_t h = 0; h < a.heads_kv; ++h) {
        const kvcache::CacheSlot slot = kvcache::cache_slot(a.block_table, a.block_table_stride, a.cache_rows,
                                                            a.cache_entries, a.cache_batch_idx, b, j);
        const int64_t kc = kvcache_offset(slot, h, a.k_cache_stride);
        const int64_t vc = kvcache_offset(slot, h, a.v_cache_stride);
        const int64_t kn = b * a.k_new_stride[0] + i * a.k_new_stride[1] + h * a.k_new_stride[2];
        const int64_t vn = b * a.v_new_stride[0] + i * a.v_new_stride[1] + h * a.v_new_stride[2];
        const int64_t es = cpu::dtype_size(a.dtype);
        if (fp8) {  // validation refuses rotary with an fp8 cache
          if (kc >= 0) quantize_row(a, a.k_new, kn, a.k_cache, kc, k_descale(a, b, h));
          if (vc >= 0) quantize_row(a, a.v_new, vn, a.v_cache, vc, v_descale(a, b, h));
          continue;
        }
        if (kc >= 0 && a.rotary_cos) {
          std::vector<float> row(static_cast<size_t>(d));
          cpu::load_row_as_float(a.k_new, a.dtype, kn, d, row.data());
          rotate(a, row.data(), int64_t(a.cache_seqlens[b]) + i);
          cpu::store_row_from_float(a.k_cache, a.dtype, kc, d, row.data());
        } else if (kc >= 0) {
          std::copy_n(static_cast<const char *>(a.k_new) + kn * es, d * es, static_cast<char *>(a.k_cache) + kc * es);
        }
        if (vc >= 0)
          std::copy_n(static_cast<const char *>(a.v_new) + vn * es, dv * es, static_cast<char *>(a.v_cache) + vc * es);
      }
    }
}

}  // namespace

int cpu_kvcache_append(const KvcacheProblem &p) {
  if (p.args->k_new) append_new_keys(*p.args);
  return FLASHBOX_OK;
}

int cpu_kvcache_attention(const KvcacheProblem &p) {
  const flashbox_kvcache_args &a = *p.args;
  if (a.k_new) append_new_keys(a);
  const int64_t d = a.head_dim, dv = p.head_dim_v, group = a.heads_q / a.heads_kv;
  const flashbox_dtype cdt = cache_dtype(a);
  const bool fp8 = cdt == FLASHBOX_FLOAT8_E4M3;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t hq = 0; hq < a.heads_q; ++hq) {
      const int64_t hk = hq / group;
      const int64_t total = int64_t(a.cache_seqlens[b]) + a.seqlen_new;
      const int64_t start = a.cache_leftpad ? a.cache_leftpad[b] : 0;
      const float slope = a.alibi_slopes ? a.alibi_slopes[b * a.alibi_batch_stride + hq] : 0.f;
      const float sink = a.learnable_sink ? a.learnable_sink[hq] : -std::numeric_limits<float>::infinity();
      const float kd = fp8 ? k_descale(a, b, hk) : 1.f, vd = fp8 ? v_descale(a, b, hk) : 1.f;
      std::vector<float> q(static_cast<size_t>(d)), row(static_cast<size_t>(std::max(d, dv))),
          acc(static_cast<size_t>(dv)), qv(a.qv ? static_cast<size_t>(dv) : 0), scores;
      for (int64_t i = 0; i < a.seqlen_q; ++i) {
        cpu::load_row_as_float(a.q, a.dtype, b * a.q_stride[0] + i * a.q_stride[1] + hq * a.q_stride[2], d, q.data());
        if (a.rotary_cos) {  // q rotated in fp32, then rounded to the dtype (as the CUDA path stores it)
          rotate(a, q.data(), kvcache::rotary_query_position(a.cache_seqlens[b], i, a.causal || a.has_window));
          for (auto &x : q) x = cpu::round_to_dtype(x, a.dtype);
        }
        if (a.qv)  // never rotated
          cpu::load_row_as_float(a.qv, a.dtype, b * a.qv_stride[0] + i * a.qv_stride[1] + hq * a.qv_stride[2], dv,
                                 qv.data());
        const kvcache::KeyRange r =
            kvcache::visible_keys(total, start, a.seqlen_q, i, a.causal, a.has_window, a.window_left, a.window_right);
        const int64_t qpos = total - a.seqlen_q + i;
        int64_t lo = std::max<int64_t>(r.lo, 0), hi = std::min(r.hi, p.capacity);
        if (a.attention_chunk > 0) {  // the keys of the row's chunk only, chunks counted from cache_leftpad
          const int64_t c0 = start + core::chunk_start(qpos - start, a.attention_chunk);
          lo = std::max(lo, c0), hi = std::min(hi, c0 + a.attention_chunk);
        }
        scores.assign(size_t(std::max<int64_t>(hi - lo, 0)), 0.f);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = lo; j < hi; ++j) {
          const int64_t kc = kvcache_offset(slot_of(a, b, j), hk, a.k_cache_stride);
          float s = 0.f;
          if (kc >= 0) {
            cpu::load_row_as_float(a.k_cache, cdt, kc, d, row.data());
            if (fp8)
              for (auto &x : row) x *= kd;
            for (int64_t x = 0; x < d; ++x) s += q[size_t(x)] * row[size_t(x)];
          }
          const int64_t vq = a.qv ? kvcache_offset(slot_of(a, b, j), hk, a.v_cache_stride) : -1;
          if (vq >= 0) {  // + qv . v: the same sum as [q | qv] . [k | v]
            cpu::load_row_as_float(a.v_cache, cdt, vq, dv, row.data());
            for (int64_t x = 0; x < dv; ++x) s += qv[size_t(x)] * row[size_t(x)];
          }
          s *= p.scale;
          if (a.softcap > 0.f) s = a.softcap * std::tanh(s / a.softcap);
          s -= slope * float(std::abs(qpos - j));
          scores[size_t(j - lo)] = s;
          mx = std::max(mx, s);
        }
        std::fill(acc.begin(), acc.end(), 0.f);
        float sum = 0.f;
        for (int64_t j = lo; j < hi; ++j) {
          const float e = std::exp(scores[size_t(j - lo)] - mx);
          sum += e;
          const int64_t vc = kvcache_offset(slot_of(a, b, j), hk, a.v_cache_stride);
          if (vc < 0) continue;
          cpu::load_row_as_float(a.v_cache, cdt, vc, dv, row.data());
          if (fp8)
            for (int64_t x = 0; x < dv; ++x) row[size_t(x)] *= vd;
          for (int64_t x = 0; x < dv; ++x) acc[size_t(x)] += e * row[size_t(x)];
        }
        if (a.learnable_sink) cpu::fold_sink(sink, mx, sum, acc.data(), dv, [](float x) { return std::exp(x); });
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        for (int64_t x = 0; x < dv; ++x) acc[size_t(x)] *= inv;
        cpu::store_row_from_float(a.o, a.dtype, b * a.o_stride[0] + i * a.o_stride[1] + hq * a.o_stride[2], dv,
                                  acc.data());
        if (a.lse)
          a.lse[(b * a.heads_q + hq) * a.seqlen_q + i] =
              sum > 0.f ? mx + std::log(sum) : -std::numeric_limits<float>::infinity();
      }
    }
  set_kernel_name("cpu_kvcache_rowwise");
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
