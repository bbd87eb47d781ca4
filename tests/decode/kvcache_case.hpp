// Test support for flashbox_attention_kvcache: one case (shape, cache layout, lengths, options) becomes
// seeded random host data (q, cache, new k/v, tables), the expected cache after the append, the fp64
// reference on the gathered cache, poisoned outputs, and a filled flashbox_kvcache_args.
//
//   KvCase c{...};  KvData d(c);            // host data, args pointing at host memory (device = cpu)
//   ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
//   d.check();                               // o, lse against fp64; cache against the expected cache
// A CUDA test calls d.to_device() before the call and d.from_device() after it.
// With fp8_cache the caches hold e4m3 bytes (cache_dtype = FLASHBOX_FLOAT8_E4M3) with k/v descales
// (none, per tensor or per (batch, kv head)); the expected cache quantizes the appended rows as the
// library must (core/float8.hpp), and the reference runs on the dequantized cache.
// head_dim_v, qv and attention_chunk (FlashAttention-3's MLA decode fields) size V and O, add a second
// query against V, and cut each row's keys to its chunk.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "cpu/kvcache_reference_fp64.hpp"
#include "flashbox/flashbox.h"

#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flashbox::test {

inline uint64_t kv_seed() {
  if (const char *s = std::getenv("FLASHBOX_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static uint64_t counter = 0;
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd()) ^ (++counter * 0x9e3779b97f4a7c15ull) ^
         uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
}

enum class CacheLayout { Contiguous, Indexed, Paged };

struct KvCase {
  int64_t batch = 2, seqlen_q = 1, heads_q = 8, heads_kv = 2, head_dim = 64;
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
  CacheLayout layout = CacheLayout::Contiguous;
  int64_t page_size = 16;  // paged only
  int64_t capacity = 300;  // keys per batch entry the cache can hold (rounded up to pages)
  int64_t seqlen_new = 0;
  // Lengths: cache_seqlens[b] is drawn in [1, capacity - seqlen_new]; entry 0 gets the maximum and
  // entry 1 (when batch > 1) gets `short_len` (default 1: a single cached key).
  int64_t short_len = 1;
  bool fixed_len = false;  // every entry at the maximum
  bool leftpad = false;
  int causal = 0;
  int has_window = 0;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  bool alibi = false;
  bool alibi_per_batch = false;  // slopes [batch, heads_q] (alibi_batch_stride = heads_q + 3: padded rows)
  bool sink = false;             // learnable_sink: one random logit per query head in [-1, 8]
  int num_splits = 0;
  int64_t rotary_dim = 0;  // 0: no rotary; else rotary_cos/sin of [capacity, rotary_dim / 2]
  int rotary_interleaved = 0;
  float softmax_scale = 0.f;
  float q_scale = 2.0f;  // spread of q (peakier softmax)
  bool fp8_cache = false;     // k_cache/v_cache in e4m3 with descales (below)
  int descale = 2;            // fp8 only: 0 none (NULL, 1.0), 1 per tensor, 2 per (batch, kv head)
  bool k_outliers = false;    // fp8 only: a few cache and new keys at the largest e4m3 magnitude
  bool zero_descale = false;  // fp8 per (batch, head) only: the last entry's kv head 0 has descales 0
  bool subnormal_codes = false;  // fp8: every cached code subnormal (exponent field 0), descales about 64
  std::vector<int64_t> lengths;  // when given: cache_seqlens of the first entries (the rest as above)
  int64_t head_dim_v = 0;        // V's and O's head dim (0: head_dim)
  bool qv = false;               // qv [batch, seqlen_q, heads_q, head_dim_v]: scores add qv . v
  int64_t attention_chunk = 0;   // > 0: each row sees only the keys of its chunk
  bool outliers = false;         // 16-bit caches: 1 in 100 values of q, qv and the caches at 8x the spread
  flashbox_device device = FLASHBOX_CPU;
  uint64_t seed = kv_seed();
};

inline const char *layout_name(CacheLayout l) {
  return l == CacheLayout::Contiguous ? "contiguous" : l == CacheLayout::Indexed ? "indexed" : "paged";
}

// The values a device's MaskingOptions test sets (the CPU and CUDA tests pick their own).
struct MaskingValues {
  int64_t causal_window_left;         // a causal window (causal_window_left, 0)
  int64_t window_left, window_right;  // a two-sided window
  float softcap, q_scale;             // softcap, with q spread by q_scale
};

// The masking variants of `base` both devices' MaskingOptions tests run, in this order: a causal
// window, a two-sided window, softcap, ALiBi per head (causal), ALiBi per batch entry (causal),
// left padding (causal, contiguous cache).
inline std::vector<KvCase> masking_variants(const KvCase &base, const MaskingValues &v) {
  KvCase w = base;
  w.causal = 1, w.has_window = 1, w.window_left = v.causal_window_left, w.window_right = 0;
  KvCase w2 = base;
  w2.has_window = 1, w2.window_left = v.window_left, w2.window_right = v.window_right;
  KvCase s = base;
  s.softcap = v.softcap, s.q_scale = v.q_scale;
  KvCase al = base;
  al.alibi = true, al.causal = 1;
  KvCase alb = al;  // slopes per batch entry ([batch, heads], as FlashAttention-2 takes them)
  alb.alibi_per_batch = true;
  KvCase lp = base;
  lp.leftpad = true, lp.causal = 1, lp.layout = CacheLayout::Contiguous;
  return {w, w2, s, al, alb, lp};
}

class KvData {
 public:
  KvCase c;
  flashbox_kvcache_args args{};
  int64_t es, ces, entries, rows, pages_per_seq = 0;  // ces: bytes per cache element
  flashbox_dtype cdt;                                 // the caches' dtype
  std::vector<float> k_descale, v_descale;            // fp8: [batch, descale_stride()] or [1]
  std::vector<uint8_t> q, qv, k_cache, v_cache, k_new, v_new, o, k_expected, v_expected;
  std::vector<float> lse, alibi, sink;
  std::vector<uint8_t> rot_cos, rot_sin;
  std::vector<int32_t> seqlens, table, batch_idx, leftpad;
  cpu::KvcacheReferenceOutput ref;

  explicit KvData(const KvCase &kc) : c(kc) {
    es = cpu::dtype_size(c.dtype);
    cdt = c.fp8_cache ? FLASHBOX_FLOAT8_E4M3 : c.dtype;
    ces = cpu::dtype_size(cdt);
    std::mt19937_64 rng(c.seed);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    if (c.fp8_cache && c.descale > 0) {
      // Around 1/200, so the cache's codes span most of e4m3's range for values of about 1.
      const int64_t n = c.descale == 1 ? 1 : c.batch * descale_stride();
      for (auto *v : {&k_descale, &v_descale}) {
        v->assign(size_t(n), std::numeric_limits<float>::quiet_NaN());  // padding is never read
        for (int64_t b = 0; b < (c.descale == 1 ? 1 : c.batch); ++b)
          for (int64_t g = 0; g < (c.descale == 1 ? 1 : c.heads_kv); ++g)
            (*v)[size_t(b * (c.descale == 1 ? 0 : descale_stride()) + g)] =
                (1.f + 0.5f * uni(rng)) * (c.subnormal_codes ? 64.f : 1.f / 200.f);
        if (c.zero_descale && c.descale == 2) (*v)[size_t((c.batch - 1) * descale_stride())] = 0.f;
      }
    }
    const int64_t D = c.head_dim, DV = dv(), Hk = c.heads_kv;
    // Cache geometry.
    if (c.layout == CacheLayout::Paged) {
      pages_per_seq = (c.capacity + c.page_size - 1) / c.page_size;
      rows = c.page_size;
      entries = c.batch * pages_per_seq + 3;  // spare pages that no table names
    } else {
      rows = c.capacity;
      entries = c.layout == CacheLayout::Indexed ? c.batch + 2 : c.batch;
    }
    const int64_t cap = c.layout == CacheLayout::Paged ? pages_per_seq * c.page_size : c.capacity;
    // Lengths.
    seqlens.resize(size_t(c.batch));
    std::uniform_int_distribution<int64_t> len_dist(1, std::max<int64_t>(1, cap - c.seqlen_new));
    for (int64_t b = 0; b < c.batch; ++b) seqlens[size_t(b)] = int32_t(len_dist(rng));
    seqlens[0] = int32_t(cap - c.seqlen_new);
    if (c.batch > 1 && !c.fixed_len) seqlens[1] = int32_t(c.short_len);
    if (c.fixed_len) std::fill(seqlens.begin(), seqlens.end(), int32_t(cap - c.seqlen_new));
    for (size_t b = 0; b < c.lengths.size() && b < seqlens.size(); ++b) seqlens[b] = int32_t(c.lengths[b]);
    if (c.leftpad) {
      leftpad.resize(size_t(c.batch));
      for (int64_t b = 0; b < c.batch; ++b)
        leftpad[size_t(b)] = int32_t(std::uniform_int_distribution<int64_t>(0, seqlens[size_t(b)])(rng) / 2);
    }
    // Tables: a shuffled page pool (non-contiguous pages), unused slots hold an out-of-range value
    // that must never be read; an indexed cache maps entries through a random permutation.
    if (c.layout == CacheLayout::Paged) {
      std::vector<int32_t> pool(static_cast<size_t>(entries));
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng);
      table.assign(size_t(c.batch * pages_per_seq), int32_t(1 << 30));
      size_t next = 0;
      for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t used = (seqlens[size_t(b)] + c.seqlen_new + c.page_size - 1) / c.page_size;
        for (int64_t pg = 0; pg < used; ++pg) table[size_t(b * pages_per_seq + pg)] = pool[next++];
      }
    } else if (c.layout == CacheLayout::Indexed) {
      std::vector<int32_t> perm(static_cast<size_t>(entries));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      batch_idx.assign(perm.begin(), perm.begin() + c.batch);
    }
    // Tensors (dense [d0][d1][heads][D]); values rounded to the dtype.
    auto fill = [&](std::vector<uint8_t> &buf, int64_t n, float scale) {
      buf.resize(size_t(n * es));
      for (int64_t i = 0; i < n; ++i) cpu::store_from_float(buf.data(), c.dtype, i, scale * uni(rng));
    };
    fill(q, c.batch * c.seqlen_q * c.heads_q * D, c.q_scale);
    if (c.fp8_cache) {  // e4m3 codes of values up to ~300 (x descale: about 1); NaN codes never drawn
      auto fill8 = [&](std::vector<uint8_t> &buf, int64_t n) {
        buf.resize(size_t(n));
        std::uniform_int_distribution<int> mant(0, 7);
        for (auto &x : buf)
          x = c.subnormal_codes ? uint8_t((uni(rng) < 0 ? 0x80 : 0) | mant(rng))  // m * 2^-9
                                : core::float_to_e4m3(300.f * uni(rng) * (c.descale == 0 ? 1.f / 200.f : 1.f));
      };
      fill8(k_cache, entries * rows * Hk * D);
      fill8(v_cache, entries * rows * Hk * DV);
    } else {
      fill(k_cache, entries * rows * Hk * D, 1.f);
      fill(v_cache, entries * rows * Hk * DV, 1.f);
    }
    if (c.seqlen_new > 0) {
      fill(k_new, c.batch * c.seqlen_new * Hk * D, 1.f);
      fill(v_new, c.batch * c.seqlen_new * Hk * DV, 1.f);
    }
    if (c.qv) fill(qv, c.batch * c.seqlen_q * c.heads_q * DV, 1.f);
    if (c.outliers && !c.fp8_cache) {  // times 8 (exact in every dtype): a few scores far above the rest
      std::uniform_int_distribution<int> pick(0, 99);
      for (auto *buf : {&q, &qv, &k_cache, &v_cache})
        for (int64_t i = 0; i < int64_t(buf->size()) / es; ++i)
          if (pick(rng) == 0) cpu::store_from_float(buf->data(), c.dtype, i, 8.f * cpu::load_as_float(buf->data(), c.dtype, i));
    }
    if (c.fp8_cache && c.k_outliers) {  // 1 in 200 keys at +-448 (x descale: 2-3x the others), new keys at +-4
      std::uniform_int_distribution<int> pick(0, 199);
      for (auto &x : k_cache)
        if (pick(rng) == 0) x = uni(rng) < 0 ? 0xfe : 0x7e;
      for (int64_t i = 0; i < int64_t(k_new.size()) / es; ++i)
        if (pick(rng) == 0) cpu::store_from_float(k_new.data(), c.dtype, i, uni(rng) < 0 ? -4.f : 4.f);
    }
    o.assign(size_t(c.batch * c.seqlen_q * c.heads_q * DV * es), 0xff);  // NaN poison in every dtype
    lse.assign(size_t(c.batch * c.heads_q * c.seqlen_q), std::numeric_limits<float>::quiet_NaN());
    if (c.alibi) {
      const int64_t rows = c.alibi_per_batch ? c.batch : 1;
      alibi.assign(size_t(rows * alibi_stride()), std::numeric_limits<float>::quiet_NaN());  // padding is never read
      for (int64_t b = 0; b < rows; ++b)
        for (int64_t h = 0; h < c.heads_q; ++h)
          alibi[size_t(b * alibi_stride() + h)] = std::pow(2.f, -8.f * float(h + 1) / float(c.heads_q)) * float(b + 1);
    }
    if (c.sink) {  // around a row's LSE over a few hundred keys, so the sink moves every row
      sink.resize(size_t(c.heads_q));
      for (float &x : sink) x = 3.5f + 4.5f * uni(rng);
    }
    // Rotary tables (random angles) and the new keys turned as the library turns them (fp32, no FMA).
    std::vector<uint8_t> k_new_rot = k_new;
    if (c.rotary_dim > 0) {
      const int64_t half = c.rotary_dim / 2;
      rot_cos.resize(size_t(cap * half * es)), rot_sin.resize(size_t(cap * half * es));
      for (int64_t i = 0; i < cap * half; ++i) {
        const float th = 3.14159265f * uni(rng);
        cpu::store_from_float(rot_cos.data(), c.dtype, i, std::cos(th));
        cpu::store_from_float(rot_sin.data(), c.dtype, i, std::sin(th));
      }
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t i = 0; i < c.seqlen_new; ++i)
          for (int64_t h = 0; h < Hk; ++h)
            rotate_row(k_new_rot, ((b * c.seqlen_new + i) * Hk + h) * D, seqlens[size_t(b)] + i);
    }
    // Expected cache: the append done by hand.
    k_expected = k_cache, v_expected = v_cache;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t i = 0; i < c.seqlen_new; ++i)
        for (int64_t h = 0; h < Hk; ++h) {
          const int64_t off = cache_element(b, seqlens[size_t(b)] + i, h);
          const int64_t src = ((b * c.seqlen_new + i) * Hk + h) * D;
          if (c.fp8_cache) {  // e4m3(x / descale), saturated; descale 0 writes 0
            const float kd = k_scale(b, h), vd = v_scale(b, h);
            for (int64_t x = 0; x < D; ++x) {
              const float kx = cpu::load_as_float(k_new.data(), c.dtype, src + x);
              const float vx = cpu::load_as_float(v_new.data(), c.dtype, src + x);
              k_expected[size_t(off + x)] = core::float_to_e4m3(kd == 0.f ? 0.f : kx / kd);
              v_expected[size_t(off + x)] = core::float_to_e4m3(vd == 0.f ? 0.f : vx / vd);
            }
            continue;
          }
          std::memcpy(&k_expected[size_t(off * es)], &k_new_rot[size_t(src * es)], size_t(D * es));
          const int64_t voff = v_cache_element(b, seqlens[size_t(b)] + i, h), vsrc = src / D * DV;
          std::memcpy(&v_expected[size_t(voff * es)], &v_new[size_t(vsrc * es)], size_t(DV * es));
        }
    build_reference(cap);
    fill_args();
  }

  // Turns the head row at element `off` of `buf` to position `pos` (the library's formula).
  void rotate_row(std::vector<uint8_t> &buf, int64_t off, int64_t pos) const {
    const int64_t half = c.rotary_dim / 2;
    for (int64_t m = 0; m < half; ++m) {
      const int64_t i0 = c.rotary_interleaved ? 2 * m : m, i1 = c.rotary_interleaved ? 2 * m + 1 : m + half;
      const float co = cpu::load_as_float(rot_cos.data(), c.dtype, pos * half + m);
      const float si = cpu::load_as_float(rot_sin.data(), c.dtype, pos * half + m);
      const float x0 = cpu::load_as_float(buf.data(), c.dtype, off + i0),
                  x1 = cpu::load_as_float(buf.data(), c.dtype, off + i1);
      const float a0 = x0 * co, b1 = x1 * si, a1 = x0 * si, b0 = x1 * co;
      cpu::store_from_float(buf.data(), c.dtype, off + i0, a0 - b1);
      cpu::store_from_float(buf.data(), c.dtype, off + i1, a1 + b0);
    }
  }

  // Element index of key j, head h of batch entry b in the (dense) cache buffers.
  int64_t cache_element(int64_t b, int64_t j, int64_t h) const {
    int64_t entry, row;
    if (c.layout == CacheLayout::Paged) {
      entry = table[size_t(b * pages_per_seq + j / c.page_size)];
      row = j % c.page_size;
    } else {
      entry = c.layout == CacheLayout::Indexed ? batch_idx[size_t(b)] : b;
      row = j;
    }
    return ((entry * rows + row) * c.heads_kv + h) * c.head_dim;
  }
  // The same in the V buffers (rows of head_dim_v).
  int64_t v_cache_element(int64_t b, int64_t j, int64_t h) const { return cache_element(b, j, h) / c.head_dim * dv(); }
  int64_t dv() const { return c.head_dim_v ? c.head_dim_v : c.head_dim; }

  void build_reference(int64_t cap) {
    cpu::KvcacheReferenceInput in;
    in.batch = c.batch, in.seqlen_q = c.seqlen_q, in.heads_q = c.heads_q, in.heads_kv = c.heads_kv;
    in.head_dim = c.head_dim, in.max_keys = cap;
    const int64_t D = c.head_dim, DV = dv();
    in.head_dim_v = DV, in.attention_chunk = c.attention_chunk;
    for (size_t i = 0; i < qv.size() / size_t(es); ++i) in.qv.push_back(cpu::load_as_float(qv.data(), c.dtype, int64_t(i)));
    in.q.resize(size_t(c.batch * c.seqlen_q * c.heads_q * D));
    std::vector<uint8_t> q_rot = q;  // q turned (and rounded to the dtype) as the library does
    if (c.rotary_dim > 0)
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t i = 0; i < c.seqlen_q; ++i)
          for (int64_t h = 0; h < c.heads_q; ++h)
            rotate_row(q_rot, ((b * c.seqlen_q + i) * c.heads_q + h) * D,
                       seqlens[size_t(b)] + ((c.causal || c.has_window) ? i : 0));
    for (size_t i = 0; i < in.q.size(); ++i) in.q[i] = cpu::load_as_float(q_rot.data(), c.dtype, int64_t(i));
    in.k.assign(size_t(c.batch * cap * c.heads_kv * D), 0.0);
    in.v.assign(size_t(c.batch * cap * c.heads_kv * DV), 0.0);
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t total = seqlens[size_t(b)] + c.seqlen_new;
      in.total.push_back(total);
      in.start.push_back(leftpad.empty() ? 0 : leftpad[size_t(b)]);
      for (int64_t j = 0; j < total; ++j)
        for (int64_t h = 0; h < c.heads_kv; ++h) {
          const int64_t src = cache_element(b, j, h), dst = ((b * cap + j) * c.heads_kv + h) * D;
          const int64_t vsrc = v_cache_element(b, j, h), vdst = dst / D * DV;
          const double kd = k_scale(b, h), vd = v_scale(b, h);  // 1 without an fp8 cache
          for (int64_t x = 0; x < D; ++x) in.k[size_t(dst + x)] = kd * cpu::load_as_float(k_expected.data(), cdt, src + x);
          for (int64_t x = 0; x < DV; ++x)
            in.v[size_t(vdst + x)] = vd * cpu::load_as_float(v_expected.data(), cdt, vsrc + x);
        }
    }
    in.scale = c.softmax_scale != 0.f ? c.softmax_scale : 1.0 / std::sqrt(double(c.qv ? D + DV : D));
    in.causal = c.causal, in.has_window = c.has_window;
    in.window_left = c.window_left, in.window_right = c.window_right;
    in.softcap = c.softcap;
    for (float s : alibi) in.alibi_slopes.push_back(s);
    in.alibi_batch_stride = c.alibi_per_batch ? alibi_stride() : 0;
    in.learnable_sink.assign(sink.begin(), sink.end());
    ref = cpu::kvcache_reference_fp64(in);
  }

  void fill_args() {
    const int64_t D = c.head_dim, DV = dv(), Hk = c.heads_kv, H = c.heads_q;
    flashbox_kvcache_args &a = args;
    a = {};
    a.struct_size = int32_t(sizeof(flashbox_kvcache_args));
    a.device = FLASHBOX_CPU;
    a.dtype = c.dtype;
    a.batch = c.batch, a.seqlen_q = c.seqlen_q, a.heads_q = H, a.heads_kv = Hk, a.head_dim = D;
    set3(a.q_stride, c.seqlen_q * H * D, H * D, D);
    set3(a.o_stride, c.seqlen_q * H * DV, H * DV, DV);
    set3(a.k_cache_stride, rows * Hk * D, Hk * D, D);
    set3(a.v_cache_stride, rows * Hk * DV, Hk * DV, DV);
    set3(a.k_new_stride, c.seqlen_new * Hk * D, Hk * D, D);
    set3(a.v_new_stride, c.seqlen_new * Hk * DV, Hk * DV, DV);
    if (c.qv) set3(a.qv_stride, c.seqlen_q * H * DV, H * DV, DV);
    a.head_dim_v = c.head_dim_v;
    a.attention_chunk = c.attention_chunk;
    a.cache_entries = entries, a.cache_rows = rows;
    a.max_blocks_per_seq = pages_per_seq, a.block_table_stride = pages_per_seq;
    a.seqlen_new = c.seqlen_new;
    a.softmax_scale = c.softmax_scale;
    a.causal = c.causal, a.has_window = c.has_window;
    a.window_left = c.window_left, a.window_right = c.window_right;
    a.softcap = c.softcap;
    a.num_splits = c.num_splits;
    a.rotary_dim = c.rotary_dim, a.rotary_interleaved = c.rotary_interleaved;
    a.cache_dtype = c.fp8_cache ? FLASHBOX_FLOAT8_E4M3 : FLASHBOX_FLOAT32;
    if (c.fp8_cache && c.descale == 2) {
      a.k_descale_stride[0] = a.v_descale_stride[0] = descale_stride();
      a.k_descale_stride[1] = a.v_descale_stride[1] = 1;
    }
    point_at_host();
  }

  void point_at_host() {
    flashbox_kvcache_args &a = args;
    a.device = FLASHBOX_CPU;
    a.q = q.data(), a.o = o.data(), a.lse = lse.data();
    a.qv = qv.empty() ? nullptr : qv.data();
    a.k_cache = k_cache.data(), a.v_cache = v_cache.data();
    a.k_new = k_new.empty() ? nullptr : k_new.data();
    a.v_new = v_new.empty() ? nullptr : v_new.data();
    a.cache_seqlens = seqlens.data();
    a.block_table = table.empty() ? nullptr : table.data();
    a.cache_batch_idx = batch_idx.empty() ? nullptr : batch_idx.data();
    a.cache_leftpad = leftpad.empty() ? nullptr : leftpad.data();
    a.alibi_slopes = alibi.empty() ? nullptr : alibi.data();
    a.alibi_batch_stride = c.alibi_per_batch ? alibi_stride() : 0;
    a.learnable_sink = sink.empty() ? nullptr : sink.data();
    a.rotary_cos = rot_cos.empty() ? nullptr : rot_cos.data();
    a.rotary_sin = rot_sin.empty() ? nullptr : rot_sin.data();
    a.k_descale = k_descale.empty() ? nullptr : k_descale.data();
    a.v_descale = v_descale.empty() ? nullptr : v_descale.data();
  }

  // fp8: the descales' batch stride (padded: heads_kv + 1), and the scales of (b, g) (1 without any).
  int64_t descale_stride() const { return c.heads_kv + 1; }
  float k_scale(int64_t b, int64_t g) const { return scale_of(k_descale, b, g); }
  float v_scale(int64_t b, int64_t g) const { return scale_of(v_descale, b, g); }
  float scale_of(const std::vector<float> &d, int64_t b, int64_t g) const {
    if (d.empty()) return 1.f;
    return c.descale == 1 ? d[0] : d[size_t(b * descale_stride() + g)];
  }

  std::string lengths_str() const {
    std::string out;
    for (int32_t l : seqlens) out += (out.empty() ? "" : ",") + std::to_string(l);
    return out;
  }

  int64_t alibi_stride() const { return c.alibi_per_batch ? c.heads_q + 3 : c.heads_q; }

  std::string name() const {
    return std::string(" [") + layout_name(c.layout) +
           (c.layout == CacheLayout::Paged ? " page " + std::to_string(c.page_size) : "") + " B" +
           std::to_string(c.batch) + " Sq" + std::to_string(c.seqlen_q) + " H" + std::to_string(c.heads_q) + "/" +
           std::to_string(c.heads_kv) + " D" + std::to_string(c.head_dim) + " cap" + std::to_string(c.capacity) +
           " new" + std::to_string(c.seqlen_new) + " causal" + std::to_string(c.causal) +
           (c.has_window ? " window(" + std::to_string(c.window_left) + "," + std::to_string(c.window_right) + ")"
                         : "") +
           (c.softcap > 0 ? " softcap" : "") + (c.alibi ? (c.alibi_per_batch ? " alibi[batch]" : " alibi") : "") +
           (c.leftpad ? " leftpad" : "") + (c.sink ? " sink" : "") +
           (c.rotary_dim ? " rotary" + std::to_string(c.rotary_dim) + (c.rotary_interleaved ? "i" : "") : "") +
           (c.fp8_cache ? std::string(" fp8-cache descale") + (c.descale == 0   ? "(none)"
                                                                : c.descale == 1 ? "(tensor)"
                                                                                 : "(batch,head)") +
                              (c.k_outliers ? " k-outliers" : "") + (c.zero_descale ? " zero-descale" : "") +
                              (c.subnormal_codes ? " subnormal-codes" : "")
                        : std::string()) +
           (c.lengths.empty() ? std::string() : " lengths " + lengths_str()) +
           (c.head_dim_v ? " Dv" + std::to_string(c.head_dim_v) : "") + (c.qv ? " qv" : "") +
           (c.attention_chunk ? " chunk" + std::to_string(c.attention_chunk) : "") + (c.outliers ? " outliers" : "") +
           " splits" + std::to_string(c.num_splits) + " " + cpu::dtype_name(c.dtype) + " seed " +
           std::to_string(c.seed) + " (FLASHBOX_TEST_SEED)]";
  }

  // o against the fp64 reference (relative Frobenius error), lse per row, the cache bytes.
  void check() const {
    double num = 0, den = 0;
    bool nan = false;
    for (size_t i = 0; i < ref.o.size(); ++i) {
      const double v = cpu::load_as_float(o.data(), c.dtype, int64_t(i));
      if (!std::isfinite(v)) nan = true;
      num += (v - ref.o[i]) * (v - ref.o[i]);
      den += ref.o[i] * ref.o[i];
    }
    EXPECT_FALSE(nan) << "non-finite value in o" << name();
    const double rel = std::sqrt(num / std::max(den, 1e-300));
    const double tol = c.dtype == FLASHBOX_FLOAT32 ? 1e-5 : 1e-2;
    EXPECT_LT(rel, tol) << "o relative error" << name();
    double lse_err = 0;
    int bad_inf = 0;
    for (size_t i = 0; i < ref.lse.size(); ++i) {
      if (std::isinf(ref.lse[i])) {
        bad_inf += !(std::isinf(lse[i]) && lse[i] < 0);
      } else {
        lse_err = std::max(lse_err, std::isfinite(lse[i]) ? std::abs(double(lse[i]) - ref.lse[i]) : 1e30);
      }
    }
    EXPECT_EQ(bad_inf, 0) << "rows that see no key must have lse = -inf" << name();
    if (!sink.empty()) check_keyless_rows();
    EXPECT_LT(lse_err, c.dtype == FLASHBOX_FLOAT32 ? 1e-4 : 2e-2) << "lse max abs error" << name();
    EXPECT_TRUE(k_cache == k_expected) << "k_cache after the call differs from the expected append" << name();
    EXPECT_TRUE(v_cache == v_expected) << "v_cache after the call differs from the expected append" << name();
  }

  // With sinks, the reference's rows that see no key (o exactly 0, lse exactly the sink): o must be
  // exactly 0 and lse the sink to fp32 rounding. Returns how many there are.
  int64_t check_keyless_rows() const {
    const int64_t D = dv();
    int64_t keyless = 0, bad = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.heads_q; ++h)
        for (int64_t i = 0; i < c.seqlen_q; ++i) {
          const size_t r = size_t((b * c.heads_q + h) * c.seqlen_q + i);
          const int64_t o_row = ((b * c.seqlen_q + i) * c.heads_q + h) * D;
          bool zero = true;
          for (int64_t x = 0; x < D; ++x) zero = zero && ref.o[size_t(o_row + x)] == 0.0;
          if (!zero || ref.lse[r] != double(sink[size_t(h)])) continue;
          ++keyless;
          bool ok = std::abs(double(lse[r]) - ref.lse[r]) <= 1e-5 * (1.0 + std::abs(ref.lse[r]));
          for (int64_t x = 0; x < D; ++x) ok = ok && cpu::load_as_float(o.data(), c.dtype, o_row + x) == 0.f;
          bad += !ok;
        }
    EXPECT_EQ(bad, 0) << "rows that see no key must have o = 0 and lse = the sink" << name();
    return keyless;
  }

#ifdef FLASHBOX_HAVE_CUDA
  // Device copies of every buffer; args re-pointed at them. Freed by the destructor.
  void to_device() {
    args.device = FLASHBOX_CUDA;
    args.q = up(q), args.o = up(o), args.k_cache = up(k_cache), args.v_cache = up(v_cache);
    args.qv = qv.empty() ? nullptr : up(qv);
    args.k_new = k_new.empty() ? nullptr : up(k_new);
    args.v_new = v_new.empty() ? nullptr : up(v_new);
    args.lse = static_cast<float *>(up(lse));
    args.cache_seqlens = static_cast<const int32_t *>(up(seqlens));
    args.block_table = table.empty() ? nullptr : static_cast<const int32_t *>(up(table));
    args.cache_batch_idx = batch_idx.empty() ? nullptr : static_cast<const int32_t *>(up(batch_idx));
    args.cache_leftpad = leftpad.empty() ? nullptr : static_cast<const int32_t *>(up(leftpad));
    args.alibi_slopes = alibi.empty() ? nullptr : static_cast<const float *>(up(alibi));
    args.alibi_batch_stride = c.alibi_per_batch ? alibi_stride() : 0;
    args.learnable_sink = sink.empty() ? nullptr : static_cast<const float *>(up(sink));
    args.rotary_cos = rot_cos.empty() ? nullptr : up(rot_cos);
    args.rotary_sin = rot_sin.empty() ? nullptr : up(rot_sin);
    args.k_descale = k_descale.empty() ? nullptr : static_cast<const float *>(up(k_descale));
    args.v_descale = v_descale.empty() ? nullptr : static_cast<const float *>(up(v_descale));
  }
  void from_device() { down(o, args.o), down(lse, args.lse), down(k_cache, args.k_cache), down(v_cache, args.v_cache); }
  ~KvData() {
    for (void *p : device_buffers_) cudaFree(p);
  }

 private:
  std::vector<void *> device_buffers_;
  template <class V>
  void *up(const V &host) {
    void *p = nullptr;
    const size_t bytes = host.size() * sizeof(host[0]);
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 16)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    device_buffers_.push_back(p);
    return p;
  }
  template <class V>
  void down(V &host, const void *dev) {
    EXPECT_EQ(cudaMemcpy(host.data(), dev, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost), cudaSuccess);
  }
#endif

 private:
  static void set3(int64_t *s, int64_t a, int64_t b, int64_t c3) { s[0] = a, s[1] = b, s[2] = c3; }
};

// The helpers the decode tests share (they compile in unity batches: one definition, not a copy a file).

// The cpu row loop on the case: its kernel ran, and o, lse and the cache match (KvData::check).
inline void run_cpu(const KvCase &c) {
  KvData d(c);
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_kvcache_rowwise") << d.name();
  d.check();
}

// Calls with the tables as modified by `mutate`, expects `code` and `needle` in the message, and that o,
// lse and both caches are unchanged.
template <class Mutate>
void expect_refused(KvData &d, int code, const std::string &needle, Mutate mutate) {
  mutate(d);
  const auto o0 = d.o, k0 = d.k_cache, v0 = d.v_cache;
  const auto lse0 = d.lse;
  EXPECT_EQ(flashbox_attention_kvcache(&d.args), code) << flashbox_last_error() << d.name();
  EXPECT_NE(std::string(flashbox_last_error()).find(needle), std::string::npos) << flashbox_last_error();
  EXPECT_TRUE(d.o == o0) << "o was written by a refused call";
  EXPECT_TRUE(d.k_cache == k0 && d.v_cache == v0) << "the cache was written by a refused call";
  EXPECT_EQ(std::memcmp(d.lse.data(), lse0.data(), lse0.size() * 4), 0) << "lse was written by a refused call";
}
template <class Mutate>
void expect_refused(const KvCase &c, int code, const std::string &needle, Mutate mutate) {
  KvData d(c);
  expect_refused(d, code, needle, mutate);
}

// One shape of the GPU tests' parameter lists.
struct GpuCase {
  CacheLayout layout;
  int64_t page_size, head_dim, heads_q, heads_kv;
};
inline void PrintTo(const GpuCase &g, std::ostream *os) {
  *os << layout_name(g.layout) << " page " << g.page_size << " d" << g.head_dim << " h" << g.heads_q << "/"
      << g.heads_kv;
}

}  // namespace flashbox::test
