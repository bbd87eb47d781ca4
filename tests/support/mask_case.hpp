// Test support for the extension (flashbox_attention_ext): one shape with a sliding window, softcap,
// ALiBi, an attention chunk and optionally variable lengths or seqused becomes seeded random host
// tensors, the ext struct, the fp64 reference forward and backward (per sequence for varlen and
// seqused, so the reference never sees packing or unused rows), and comparisons of o / lse / dq / dk /
// dv with it. Document ids, prefix lengths and a block mask (given as one dense kind per block pair,
// encoded here into FlexAttention's index tables; the reference reads the dense kinds, not the
// tables) join the mask when set. Fixed-length tensors are BTHD, varlen tensors [total, heads, head_dim]; outputs are
// poisoned with NaN before every call. Query rows past seqused_q are not compared: the forward must
// leave them as they were (unused_outputs_untouched), the backward's gradients there must be 0.
// dtype FLASHBOX_FLOAT8_E4M3 (forward only): q, k and v are normals (q and k with outliers when asked)
// quantized to e4m3 under descales per tensor or per (batch entry, kv head), o is in out_dtype, and the
// reference runs on the dequantized inputs (float(e4m3) * descale, computed here in fp32, apart from
// the library's dequantisation).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/float8.hpp"
#include "core/masks.hpp"
#include "cpu/reference_backward_fp64.hpp"
#include "cpu/reference_fp64.hpp"
#include "flashbox/flashbox.h"
#include "support/attention_case.hpp"

namespace flashbox::test {

// A block mask as the test means it: kinds[((b * heads + h) * q_blocks + r) * kv_blocks + c] is
// core::kBlockSkipped / kBlockPartial / kBlockFull (batches, heads: 1 or the call's). MaskData encodes
// it as flashbox_block_mask tables, `pad` spare entries per row (garbage past the counts), the indices
// of a row in a seeded shuffled order.
struct BlockSpec {
  int64_t q_block = 16, kv_block = 16, batches = 1, heads = 1;
  std::vector<uint8_t> kinds;  // empty: no block mask
  bool full_lists = true;      // full blocks in full_kv_*; false: kinds may not hold kBlockFull
  bool transposes = false;     // q_* (and full_q_*) given too
  int64_t pad = 2;
  bool on() const { return !kinds.empty(); }
};

struct MaskCase {
  int64_t batch = 2, seqlen_q = 40, seqlen_k = 40, heads_q = 2, heads_kv = 1, head_dim = 16;
  flashbox_dtype dtype = FLASHBOX_FLOAT32;
  int causal = 0;
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  int alibi = 0;                        // 0 off, 1 one slope per head, 2 a row of slopes per batch
  std::vector<int32_t> lens_q, lens_k;  // non-empty: variable length (batch = lens_q.size())
  int64_t attention_chunk = 0;
  std::vector<int32_t> used_q, used_k;  // non-empty: seqused_q / seqused_k, one per sequence
  bool sink = false;                    // a learnable sink per query head (and its gradient dsink)
  std::vector<int32_t> docs_q, docs_k;  // document ids [batch, seqlen] (varlen: [total]); empty: off
  std::vector<int32_t> prefix;          // prefix-LM lengths [batch]; empty: off
  BlockSpec blocks;
  // dtype FLASHBOX_FLOAT8_E4M3 only: o's dtype, the descales' shape, outliers in q and k (one value in
  // 64 six times larger, so a few rows' softmax is peaked and the per-tensor scales coarse).
  enum class Descale { none, tensor, head };
  flashbox_dtype out_dtype = FLASHBOX_BFLOAT16;
  Descale descale = Descale::head;
  bool outliers = true;
  // fp16 / bf16 / fp32 inputs: outliers in q and k (one value in 64 six times larger), as fp8's above.
  bool input_outliers = false;
  uint64_t seed = fresh_seed();

  bool fp8() const { return dtype == FLASHBOX_FLOAT8_E4M3; }
  flashbox_dtype o_dtype() const { return fp8() ? out_dtype : dtype; }

  bool varlen() const { return !lens_q.empty(); }
  bool per_sequence() const { return varlen() || !used_q.empty() || !used_k.empty(); }
  std::string name() const {
    std::string s = "b" + std::to_string(batch) + "_sq" + std::to_string(seqlen_q) + "_sk" + std::to_string(seqlen_k) +
                    "_hq" + std::to_string(heads_q) + "_hkv" + std::to_string(heads_kv) + "_d" +
                    std::to_string(head_dim) + "_" + cpu::dtype_name(dtype) + (causal ? "_causal" : "") + "_w" +
                    std::to_string(window_left) + "," + std::to_string(window_right) +
                    (softcap > 0 ? "_cap" + std::to_string(softcap) : "") +
                    (alibi ? "_alibi" + std::to_string(alibi) : "") + (varlen() ? "_varlen" : "") +
                    (attention_chunk ? "_chunk" + std::to_string(attention_chunk) : "") +
                    (used_q.empty() ? "" : "_usedq") + (used_k.empty() ? "" : "_usedk") + (sink ? "_sink" : "") +
                    (docs_q.empty() ? "" : "_docs") + (prefix.empty() ? "" : "_prefix") +
                    (blocks.on() ? "_blocks" + std::to_string(blocks.q_block) + "x" + std::to_string(blocks.kv_block) +
                                       "_bcast" + std::to_string(blocks.batches) + "," + std::to_string(blocks.heads) +
                                       (blocks.transposes ? "_transposes" : "")
                                 : "") +
                    (fp8() ? std::string("_out_") + cpu::dtype_name(out_dtype) + "_descale" +
                                 (descale == Descale::none     ? "_none"
                                  : descale == Descale::tensor ? "_tensor"
                                                               : "_head") +
                                 (outliers ? "_outliers" : "")
                           : (input_outliers ? "_outliers" : ""));
    return s + "_seed" + std::to_string(seed) + " (rerun with FLASHBOX_TEST_SEED=" + std::to_string(seed) + ")";
  }
};

struct Error {
  double rel = 0;
  bool nan = false;
};

class MaskData {
 public:
  explicit MaskData(MaskCase c) : c_(std::move(c)) {
    if (c_.varlen()) {
      c_.batch = int64_t(c_.lens_q.size());
      cu_q_.assign(1, 0), cu_k_.assign(1, 0);
      for (int64_t s = 0; s < c_.batch; ++s) {
        cu_q_.push_back(cu_q_.back() + c_.lens_q[size_t(s)]);
        cu_k_.push_back(cu_k_.back() + c_.lens_k[size_t(s)]);
      }
      c_.seqlen_q = cu_q_.back(), c_.seqlen_k = cu_k_.back();
    }
    rows_q_ = c_.varlen() ? c_.seqlen_q : c_.batch * c_.seqlen_q;  // token rows of q / o / dout / dq
    rows_k_ = c_.varlen() ? c_.seqlen_k : c_.batch * c_.seqlen_k;
    const int64_t es = cpu::dtype_size(c_.dtype);
    std::mt19937_64 rng(c_.seed);
    auto fill = [&](std::vector<uint8_t> &buf, int64_t n, bool spiky = false) {
      buf.resize(size_t(n * es));
      std::normal_distribution<float> normal(0.f, 1.f);
      std::uniform_int_distribution<int> pick(0, 63);
      for (int64_t i = 0; i < n; ++i)
        cpu::store_from_float(buf.data(), c_.dtype, i, normal(rng) * (spiky && pick(rng) == 0 ? 6.0f : 1.0f));
    };
    if (c_.fp8()) {
      quantize(rng);
    } else {
      fill(q_, rows_q_ * c_.heads_q * c_.head_dim, c_.input_outliers);
      fill(k_, rows_k_ * c_.heads_kv * c_.head_dim, c_.input_outliers);
      fill(v_, rows_k_ * c_.heads_kv * c_.head_dim);
      fill(dout_, rows_q_ * c_.heads_q * c_.head_dim);
    }
    o_.resize(size_t(rows_q_ * c_.heads_q * c_.head_dim * cpu::dtype_size(c_.o_dtype())));
    dq_.resize(q_.size()), dk_.resize(k_.size()), dv_.resize(k_.size());
    lse_.assign(size_t(c_.varlen() ? c_.heads_q * c_.seqlen_q : c_.batch * c_.heads_q * c_.seqlen_q), 0.f);
    if (c_.alibi) {
      std::uniform_real_distribution<float> u(0.f, 0.3f);
      slopes_.resize(size_t(c_.alibi == 2 ? c_.batch * (c_.heads_q + 3) : c_.heads_q));
      for (float &s : slopes_) s = u(rng);
    }

    a_ = flashbox_attention_args{};
    a_.device = FLASHBOX_CPU, a_.dtype = c_.dtype, a_.impl = FLASHBOX_AUTO;
    a_.batch = c_.batch, a_.seqlen_q = c_.seqlen_q, a_.seqlen_k = c_.seqlen_k;
    a_.heads_q = c_.heads_q, a_.heads_kv = c_.heads_kv, a_.head_dim = c_.head_dim;
    a_.q = q_.data(), a_.k = k_.data(), a_.v = v_.data(), a_.o = o_.data(), a_.lse = lse_.data();
    strides(c_.heads_q, c_.seqlen_q, a_.q_stride), strides(c_.heads_q, c_.seqlen_q, a_.o_stride);
    strides(c_.heads_kv, c_.seqlen_k, a_.k_stride), strides(c_.heads_kv, c_.seqlen_k, a_.v_stride);
    a_.causal = c_.causal;

    e_ = flashbox_attention_ext_default();
    e_.window_left = c_.window_left, e_.window_right = c_.window_right, e_.softcap = c_.softcap;
    if (c_.alibi) e_.alibi_slopes = slopes_.data(), e_.alibi_batch_stride = c_.alibi == 2 ? c_.heads_q + 3 : 0;
    e_.attention_chunk = c_.attention_chunk;
    if (c_.sink) {  // around the scores' scale, head 0 far above them (the sink takes most of each row)
      std::normal_distribution<float> normal(0.f, 1.5f);
      sinks_.resize(size_t(c_.heads_q));
      for (float &s : sinks_) s = normal(rng);
      sinks_[0] = 6.0f;
      dsink_.assign(sinks_.size(), 0.f);
      e_.learnable_sink = sinks_.data(), e_.dsink = dsink_.data();
    }
    if (!c_.used_q.empty()) e_.seqused_q = c_.used_q.data();
    if (!c_.used_k.empty()) e_.seqused_k = c_.used_k.data();
    if (c_.varlen()) {
      e_.cu_seqlens_q = cu_q_.data(), e_.cu_seqlens_k = cu_k_.data();
      for (int64_t s = 0; s < c_.batch; ++s) {
        e_.max_seqlen_q = std::max<int64_t>(e_.max_seqlen_q, c_.lens_q[size_t(s)]);
        e_.max_seqlen_k = std::max<int64_t>(e_.max_seqlen_k, c_.lens_k[size_t(s)]);
      }
    }
    if (!c_.docs_q.empty()) e_.document_ids_q = c_.docs_q.data(), e_.document_ids_k = c_.docs_k.data();
    if (!c_.prefix.empty()) e_.prefix_lengths = c_.prefix.data();
    if (c_.blocks.on()) encode_blocks(rng);
    if (c_.fp8()) {
      e_.out_dtype = c_.out_dtype;
      if (c_.descale != MaskCase::Descale::none) {
        const int64_t bs = c_.descale == MaskCase::Descale::head ? descale_batch_stride() : 0;
        const int64_t hs = c_.descale == MaskCase::Descale::head ? 1 : 0;
        e_.q_descale = descales_[0].data(), e_.k_descale = descales_[1].data(), e_.v_descale = descales_[2].data();
        for (int64_t *st : {e_.q_descale_stride, e_.k_descale_stride, e_.v_descale_stride}) st[0] = bs, st[1] = hs;
      }
    }
    reference();
  }
  MaskData(const MaskData &) = delete;

  // The encoded block mask (e_.block_mask points at it) and its tables, for tests that corrupt them.
  flashbox_block_mask &block_mask() { return bm_; }
  std::vector<int32_t> &block_table(int which) { return tables_[which]; }  // kv_num, kv_idx, full_kv_num, ...

  const MaskCase &config() const { return c_; }
  std::string name() const { return c_.name(); }
  double tolerance() const { return c_.o_dtype() == FLASHBOX_FLOAT32 ? 1e-5 : 1e-2; }
  // fp8: the dequantized inputs the reference reads (dense fp32, the layout of q, k, v), and the
  // descales ([batch, heads_kv] rows of descale_batch_stride(); per tensor: one value).
  const std::vector<float> &dequantized(int which) const { return deq_[which]; }
  std::vector<float> &descales(int which) { return descales_[which]; }
  flashbox_attention_ext &ext_mut() { return e_; }
  const std::vector<double> &reference_o() const { return ref_o_; }
  const std::vector<char> &rows_used_q() const { return row_used_q_; }
  const flashbox_attention_ext &ext() const { return e_; }

  // Forward through the extension with `impl`; o and lse poisoned first.
  int forward(flashbox_impl impl) {
    const flashbox_attention_args a = forward_args(impl);
    return flashbox_attention_forward_ext(&a, &e_);
  }

  // Backward through the extension with `impl`, o and lse set to the reference's (rounded), dq/dk/dv
  // poisoned first.
  int backward(flashbox_impl impl, int deterministic = 0) {
    const flashbox_attention_grad_args g = grad_args(impl, deterministic);
    return flashbox_attention_backward_ext(&g, &e_);
  }

  // The backward's arguments: o and lse set to the reference's (rounded), dq/dk/dv poisoned.
  flashbox_attention_grad_args grad_args(flashbox_impl impl, int deterministic = 0) {
    for (size_t i = 0; i < ref_o_.size(); ++i) cpu::store_from_float(o_.data(), c_.dtype, int64_t(i), float(ref_o_[i]));
    for (size_t i = 0; i < ref_lse_.size(); ++i) lse_[i] = float(ref_lse_[i]);
    poison(dq_), poison(dk_), poison(dv_);
    std::fill(dsink_.begin(), dsink_.end(), std::numeric_limits<float>::quiet_NaN());
    flashbox_attention_grad_args g{};
    g.fwd = a_;
    g.fwd.impl = impl;
    g.dout = dout_.data(), g.dq = dq_.data(), g.dk = dk_.data(), g.dv = dv_.data();
    std::copy_n(a_.o_stride, 3, g.dout_stride), std::copy_n(a_.q_stride, 3, g.dq_stride);
    std::copy_n(a_.k_stride, 3, g.dk_stride), std::copy_n(a_.k_stride, 3, g.dv_stride);
    g.deterministic = deterministic;
    return g;
  }

  // The forward's arguments (o and lse poisoned) and everything a test may edit or compare.
  flashbox_attention_args forward_args(flashbox_impl impl) {
    poison(o_);
    std::fill(lse_.begin(), lse_.end(), std::numeric_limits<float>::quiet_NaN());
    flashbox_attention_args a = a_;
    a.impl = impl;
    return a;
  }
  std::vector<uint8_t> outputs_snapshot() const {
    std::vector<uint8_t> all(o_);
    const auto *l = reinterpret_cast<const uint8_t *>(lse_.data());
    all.insert(all.end(), l, l + lse_.size() * 4);
    for (const auto *g : {&dq_, &dk_, &dv_}) all.insert(all.end(), g->begin(), g->end());
    return all;
  }
  std::vector<uint8_t> &o_bytes() { return o_; }
  std::vector<float> &lse() { return lse_; }
  std::vector<float> &slopes() { return slopes_; }
  std::vector<int32_t> &cu_q() { return cu_q_; }
  std::vector<int32_t> &cu_k() { return cu_k_; }

  Error o_error() const { return error(o_, ref_o_, HeadRows::used_q, c_.o_dtype()); }
  Error dq_error() const { return error(dq_, ref_dq_); }
  Error dk_error() const { return error(dk_, ref_dk_); }
  Error dv_error() const { return error(dv_, ref_dv_); }
  // dsink against the reference's (relative, NaN fails); 0 without sinks.
  double dsink_error() const {
    double d2 = 0, r2 = 0;
    for (size_t h = 0; h < dsink_.size(); ++h) {
      if (std::isnan(dsink_[h])) return INFINITY;
      d2 += (dsink_[h] - ref_dsink_[h]) * (dsink_[h] - ref_dsink_[h]), r2 += ref_dsink_[h] * ref_dsink_[h];
    }
    return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
  }
  // Max |lse - ref| over rows with a finite reference; inf when a row disagrees on -inf or is NaN.
  double lse_error() const {
    double e = 0;
    for (size_t i = 0; i < ref_lse_.size(); ++i) {
      if (!lse_used_[i]) continue;
      const double got = lse_[i], want = ref_lse_[i];
      if (std::isnan(got)) return INFINITY;
      if (std::isinf(want) || std::isinf(got)) {
        if (got != want) return INFINITY;
      } else {
        e = std::max(e, std::abs(got - want));
      }
    }
    return e;
  }
  // Rows of the reference with no visible key (O = 0, LSE = -inf): the tests want some of them.
  int64_t empty_rows() const {
    int64_t n = 0;
    for (size_t i = 0; i < ref_lse_.size(); ++i) n += lse_used_[i] && std::isinf(ref_lse_[i]);
    return n;
  }
  // After a refused call: every byte of o still holds the poison of poison(). Returns the first byte
  // that does not, or -1.
  int64_t first_written_o_byte() const {
    for (size_t i = 0; i < o_.size(); ++i)
      if (!holds_poison(o_, i)) return int64_t(i);
    return -1;
  }
  // After a forward: o's bytes and lse of the query rows past seqused_q still hold the poison.
  bool unused_outputs_untouched() const {
    const int64_t row_bytes = c_.heads_q * c_.head_dim * cpu::dtype_size(c_.o_dtype());
    for (int64_t r = 0; r < rows_q_; ++r)
      if (!row_used_q_[size_t(r)])
        for (int64_t i = r * row_bytes; i < (r + 1) * row_bytes; ++i)
          if (!holds_poison(o_, size_t(i))) return false;
    for (size_t i = 0; i < lse_.size(); ++i)
      if (!lse_used_[i] && !std::isnan(lse_[i])) return false;
    return true;
  }

 private:
  // BTHD, or for varlen [total, heads, head_dim] (stride[0] unused, but the CUDA checks want every
  // stride a 16-byte multiple: the whole tensor's).
  void strides(int64_t heads, int64_t seq, int64_t (&st)[3]) const {
    st[2] = c_.head_dim, st[1] = heads * c_.head_dim, st[0] = seq * heads * c_.head_dim;
  }

  // Padded rows of per-(batch, kv head) descales: a stride of its own, not heads_kv.
  int64_t descale_batch_stride() const { return c_.heads_kv + 2; }

  // fp8 inputs: x ~ N(0, 1) (q and k with outliers), quantized as x / s to e4m3 with s per tensor
  // (amax / 448) or per (batch entry, kv head) (that slice's amax / 448, times a random factor in
  // [0.5, 1] so that no slice reaches 448 exactly); the dequantized values float(e4m3) * s are kept for
  // the reference. q's head h uses kv head h / group's descale.
  void quantize(std::mt19937_64 &rng) {
    const int64_t hq = c_.heads_q, hk = c_.heads_kv, d = c_.head_dim, group = hq / hk;
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_int_distribution<int> pick(0, 63);
    std::uniform_real_distribution<float> shrink(0.5f, 1.0f);
    const int64_t nb = c_.batch, bs = descale_batch_stride();
    for (int which = 0; which < 3; ++which) {
      const bool is_q = which == 0;
      const int64_t rows = is_q ? rows_q_ : rows_k_, heads = is_q ? hq : hk;
      std::vector<float> x(size_t(rows * heads * d));
      for (float &y : x) y = normal(rng) * (which < 2 && c_.outliers && pick(rng) == 0 ? 6.0f : 1.0f);
      // The batch entry (varlen: sequence) of each row.
      std::vector<int64_t> entry(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        if (c_.varlen()) {
          const std::vector<int32_t> &cu = is_q ? cu_q_ : cu_k_;
          entry[size_t(r)] = int64_t(std::upper_bound(cu.begin(), cu.end(), int32_t(r)) - cu.begin()) - 1;
        } else {
          entry[size_t(r)] = r / (is_q ? c_.seqlen_q : c_.seqlen_k);
        }
      }
      std::vector<float> amax(size_t(nb * hk), 0.f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t c = 0; c < d; ++c) {
            float &m = amax[size_t(entry[size_t(r)] * hk + h / (is_q ? group : 1))];
            m = std::max(m, std::abs(x[size_t((r * heads + h) * d + c)]));
          }
      std::vector<float> &ds = descales_[which];
      auto scale_of = [&](int64_t b, int64_t g) {
        return ds[size_t(c_.descale == MaskCase::Descale::head ? b * bs + g : 0)];
      };
      if (c_.descale == MaskCase::Descale::head) {
        ds.assign(size_t(nb * bs), -7.0f);  // padding: never read
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t g = 0; g < hk; ++g)
            ds[size_t(b * bs + g)] = std::max(amax[size_t(b * hk + g)], 1e-3f) / 448.0f / shrink(rng);
      } else {
        const float all = *std::max_element(amax.begin(), amax.end());
        ds.assign(1, c_.descale == MaskCase::Descale::tensor ? std::max(all, 1e-3f) / 448.0f : 1.0f);
      }
      std::vector<uint8_t> &bytes = which == 0 ? q_ : which == 1 ? k_ : v_;
      bytes.resize(x.size());
      deq_[which].resize(x.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
          const float s = scale_of(entry[size_t(r)], h / (is_q ? group : 1));
          for (int64_t c = 0; c < d; ++c) {
            const size_t i = size_t((r * heads + h) * d + c);
            bytes[i] = core::float_to_e4m3(x[i] / s);
            deq_[which][i] = core::e4m3_to_float(bytes[i]) * s;
          }
        }
    }
  }

  // The poison: 0xff, 0x7f byte pairs (a NaN in bf16, fp16 and fp32 alike).
  static uint8_t poison_byte(size_t i) { return (i & 1) ? 0x7f : 0xff; }
  static bool holds_poison(const std::vector<uint8_t> &buf, size_t i) { return buf[i] == poison_byte(i); }
  void poison(std::vector<uint8_t> &buf) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = poison_byte(i);
  }

  // flashbox_block_mask tables from c_.blocks.kinds: for each direction and kind, per row the count
  // and the listed indices (shuffled), `pad` entries of garbage past the largest count.
  void encode_blocks(std::mt19937_64 &rng) {
    const BlockSpec &bs = c_.blocks;
    const int64_t nq = (c_.seqlen_q + bs.q_block - 1) / bs.q_block, nk = (c_.seqlen_k + bs.kv_block - 1) / bs.kv_block;
    const int64_t bh = bs.batches * bs.heads;
    const int64_t wk = nk + bs.pad, wq = nq + bs.pad;
    for (int dir = 0; dir < 2; ++dir)  // 0: kv_* (rows: q blocks), 1: q_* (rows: kv blocks)
      for (uint8_t kind : {core::kBlockPartial, core::kBlockFull}) {
        const int64_t rows = dir == 0 ? nq : nk, width = dir == 0 ? wk : wq, targets = dir == 0 ? nk : nq;
        std::vector<int32_t> &num = tables_[dir * 4 + (kind == core::kBlockFull ? 2 : 0)];
        std::vector<int32_t> &idx = tables_[dir * 4 + (kind == core::kBlockFull ? 3 : 1)];
        num.assign(size_t(bh * rows), 0), idx.assign(size_t(bh * rows * width), 12345);
        for (int64_t x = 0; x < bh; ++x)
          for (int64_t r = 0; r < rows; ++r) {
            std::vector<int32_t> list;
            for (int64_t t = 0; t < targets; ++t) {
              const int64_t qb = dir == 0 ? r : t, kb = dir == 0 ? t : r;
              if (bs.kinds[size_t((x * nq + qb) * nk + kb)] == kind) list.push_back(int32_t(t));
            }
            std::shuffle(list.begin(), list.end(), rng);
            num[size_t(x * rows + r)] = int32_t(list.size());
            std::copy(list.begin(), list.end(), idx.begin() + (x * rows + r) * width);
          }
      }
    bm_ = flashbox_block_mask{};
    bm_.struct_size = int32_t(sizeof bm_);
    bm_.batch = bs.batches, bm_.heads = bs.heads, bm_.q_block_size = bs.q_block, bm_.kv_block_size = bs.kv_block;
    bm_.max_kv_blocks = wk, bm_.max_q_blocks = bs.transposes ? wq : 0;
    bm_.kv_num_blocks = tables_[0].data(), bm_.kv_indices = tables_[1].data();
    if (bs.full_lists) bm_.full_kv_num_blocks = tables_[2].data(), bm_.full_kv_indices = tables_[3].data();
    if (bs.transposes) {
      bm_.q_num_blocks = tables_[4].data(), bm_.q_indices = tables_[5].data();
      if (bs.full_lists) bm_.full_q_num_blocks = tables_[6].data(), bm_.full_q_indices = tables_[7].data();
    }
    e_.block_mask = &bm_;
    table_ = core::BlockTable{};
    table_.kind = c_.blocks.kinds.data(), table_.q_block = bs.q_block, table_.kv_block = bs.kv_block;
    table_.q_blocks = nq, table_.kv_blocks = nk, table_.batches = bs.batches, table_.heads = bs.heads;
  }

  core::ScoreMods mods(int64_t seq_index) const {
    core::ScoreMods m;
    // Document ids, prefix and block kinds straight from the case (the reference never reads the
    // encoded tables); per sequence, sequence s's.
    if (!c_.docs_q.empty()) {
      const bool ps = c_.per_sequence();
      m.doc_q = c_.docs_q.data() + (ps ? (c_.varlen() ? cu_q_[size_t(seq_index)] : seq_index * c_.seqlen_q) : 0);
      m.doc_k = c_.docs_k.data() + (ps ? (c_.varlen() ? cu_k_[size_t(seq_index)] : seq_index * c_.seqlen_k) : 0);
      m.doc_q_stride = ps ? 0 : c_.seqlen_q, m.doc_k_stride = ps ? 0 : c_.seqlen_k;
    }
    if (!c_.prefix.empty()) m.prefix = c_.prefix.data() + (c_.per_sequence() ? seq_index : 0);
    if (c_.blocks.on()) m.blocks = c_.per_sequence() ? table_.entry(seq_index) : table_;
    m.window_left = c_.window_left, m.window_right = c_.causal ? 0 : c_.window_right, m.softcap = c_.softcap;
    m.chunk = c_.attention_chunk;
    if (c_.sink) m.sinks = sinks_.data();
    if (c_.alibi) m.alibi_slopes = slopes_.data(), m.alibi_batch_stride = e_.alibi_batch_stride;
    if (c_.varlen() && m.alibi_slopes) m.alibi_slopes += seq_index * m.alibi_batch_stride;
    return m;
  }

  // The fp64 reference, per sequence for varlen and seqused (each a fixed-length batch-1 call on
  // views of the sequence's used rows).
  void reference() {
    const int64_t HQ = c_.heads_q, HKV = c_.heads_kv, D = c_.head_dim, es = cpu::dtype_size(c_.dtype);
    ref_o_.assign(size_t(rows_q_ * HQ * D), 0.0), ref_dq_.assign(ref_o_.size(), 0.0);
    ref_dk_.assign(size_t(rows_k_ * HKV * D), 0.0), ref_dv_.assign(ref_dk_.size(), 0.0);
    ref_lse_.assign(lse_.size(), -INFINITY);
    row_used_q_.assign(size_t(rows_q_), 1), lse_used_.assign(lse_.size(), 1);
    ref_dsink_.assign(sinks_.size(), 0.0);
    std::vector<double> dsink;
    // The reference's inputs: the call's own, or for fp8 the dequantized fp32 copies in the same layout.
    flashbox_attention_args ra = a_;
    const uint8_t *rq = q_.data(), *rk = k_.data(), *rv = v_.data();
    int64_t es_in = es;
    if (c_.fp8()) {
      ra.dtype = FLASHBOX_FLOAT32, es_in = 4;
      rq = reinterpret_cast<const uint8_t *>(deq_[0].data());
      rk = reinterpret_cast<const uint8_t *>(deq_[1].data());
      rv = reinterpret_cast<const uint8_t *>(deq_[2].data());
      ra.q = rq, ra.k = rk, ra.v = rv;
    }
    if (!c_.per_sequence()) {
      const core::ScoreMods m = mods(0);
      cpu::reference_attention_fp64(ra, ref_o_, &ref_lse_, &m);
      if (c_.fp8()) return;  // forward only
      flashbox_attention_grad_args g{};
      g.fwd = a_, g.dout = dout_.data();
      std::copy_n(a_.o_stride, 3, g.dout_stride);
      cpu::reference_attention_backward_fp64(g, ref_dq_, ref_dk_, ref_dv_, &m, 0, c_.sink ? &ref_dsink_ : nullptr);
      return;
    }
    for (int64_t s = 0; s < c_.batch; ++s) {
      // Token rows: packed for varlen; batch entry s's rows of the BTHD tensors otherwise.
      const bool vl = c_.varlen();
      const int64_t q0 = vl ? cu_q_[size_t(s)] : s * c_.seqlen_q, k0 = vl ? cu_k_[size_t(s)] : s * c_.seqlen_k;
      const int64_t span_q = vl ? c_.lens_q[size_t(s)] : c_.seqlen_q, span_k = vl ? c_.lens_k[size_t(s)] : c_.seqlen_k;
      // Clamped to the spans: a case built to be refused (used > span) must not send the reference
      // past the buffers.
      const int64_t lq = c_.used_q.empty() ? span_q : std::clamp<int64_t>(c_.used_q[size_t(s)], 0, span_q);
      const int64_t lk = c_.used_k.empty() ? span_k : std::clamp<int64_t>(c_.used_k[size_t(s)], 0, span_k);
      auto lse_at = [&](int64_t h, int64_t i) { return size_t(vl ? h * c_.seqlen_q + q0 + i : (s * HQ + h) * c_.seqlen_q + i); };
      for (int64_t i = lq; i < span_q; ++i) {
        row_used_q_[size_t(q0 + i)] = 0;
        for (int64_t h = 0; h < HQ; ++h) lse_used_[lse_at(h, i)] = 0;
      }
      if (lq == 0) continue;  // nothing to compute
      if (lk == 0) {  // O = 0, gradients 0: already so; LSE -inf, or the sink
        if (c_.sink)
          for (int64_t h = 0; h < HQ; ++h)
            for (int64_t i = 0; i < lq; ++i) ref_lse_[lse_at(h, i)] = sinks_[size_t(h)];
        continue;
      }
      flashbox_attention_args a = ra;
      a.batch = 1, a.seqlen_q = lq, a.seqlen_k = lk;
      a.q = rq + q0 * HQ * D * es_in, a.k = rk + k0 * HKV * D * es_in, a.v = rv + k0 * HKV * D * es_in;
      const core::ScoreMods m = mods(s);
      std::vector<double> o, lse, dq, dk, dv;
      cpu::reference_attention_fp64(a, o, &lse, &m);
      std::copy(o.begin(), o.end(), ref_o_.begin() + q0 * HQ * D);
      for (int64_t h = 0; h < HQ; ++h)
        for (int64_t i = 0; i < lq; ++i) ref_lse_[lse_at(h, i)] = lse[size_t(h * lq + i)];
      if (c_.fp8()) continue;  // forward only
      flashbox_attention_grad_args g{};
      g.fwd = a, g.dout = dout_.data() + q0 * HQ * D * es;
      std::copy_n(a_.o_stride, 3, g.dout_stride);
      cpu::reference_attention_backward_fp64(g, dq, dk, dv, &m, 0, c_.sink ? &dsink : nullptr);
      for (size_t h = 0; h < dsink.size(); ++h) ref_dsink_[h] += dsink[h];
      std::copy(dq.begin(), dq.end(), ref_dq_.begin() + q0 * HQ * D);
      std::copy(dk.begin(), dk.end(), ref_dk_.begin() + k0 * HKV * D);
      std::copy(dv.begin(), dv.end(), ref_dv_.begin() + k0 * HKV * D);
    }
  }

  // Which token rows an error covers: every row, or the query rows a forward writes.
  enum class HeadRows { all, used_q };

  Error error(const std::vector<uint8_t> &buf, const std::vector<double> &ref, HeadRows rows = HeadRows::all) const {
    return error(buf, ref, rows, c_.dtype);
  }
  Error error(const std::vector<uint8_t> &buf, const std::vector<double> &ref, HeadRows rows, flashbox_dtype t) const {
    Error r;
    double d2 = 0, r2 = 0;
    const size_t row_elems = size_t(c_.heads_q * c_.head_dim);
    for (size_t i = 0; i < ref.size(); ++i) {
      if (rows == HeadRows::used_q && !row_used_q_[i / row_elems]) continue;
      const double got = cpu::load_as_float(buf.data(), t, int64_t(i));
      if (!std::isfinite(got)) r.nan = true;
      d2 += (got - ref[i]) * (got - ref[i]), r2 += ref[i] * ref[i];
    }
    r.rel = r.nan ? INFINITY : (r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2));
    return r;
  }

  MaskCase c_;
  int64_t rows_q_ = 0, rows_k_ = 0;
  std::vector<uint8_t> q_, k_, v_, o_, dout_, dq_, dk_, dv_;
  std::vector<float> lse_, slopes_, sinks_, dsink_;
  std::vector<int32_t> cu_q_, cu_k_;
  flashbox_attention_args a_{};
  flashbox_attention_ext e_{};
  flashbox_block_mask bm_{};
  std::vector<int32_t> tables_[8];  // kv_num, kv_idx, full_kv_num, full_kv_idx, q_num, q_idx, full_q_num, full_q_idx
  core::BlockTable table_;
  std::vector<double> ref_o_, ref_lse_, ref_dq_, ref_dk_, ref_dv_, ref_dsink_;
  std::vector<float> deq_[3], descales_[3];  // fp8: dequantized q, k, v and their descales
  std::vector<char> row_used_q_, lse_used_;  // query rows / lse entries a forward writes (seqused_q)
};

// A call that must be refused: `call()` returns `code`, the message holds every phrase of
// `mentions`, and no output of `d` changed.
template <class Call>
inline void expect_call_refused(MaskData &d, Call call, int code, const std::vector<std::string> &mentions) {
  const std::vector<uint8_t> before = d.outputs_snapshot();
  EXPECT_EQ(call(), code) << flashbox_last_error();
  const std::string msg = flashbox_last_error();
  for (const std::string &m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "'" << m << "' not in: " << msg;
  EXPECT_TRUE(before == d.outputs_snapshot()) << "a refused call wrote an output";
}

// A field the CUDA sm80 family takes: a device = cuda call with these host buffers fails for another
// reason (a build without CUDA, no GPU, host memory) or runs, but is never refused as a cpu-only
// field; a failed call writes nothing.
template <class Call>
inline void expect_cuda_takes(MaskData &d, Call call, const std::string &field) {
  const std::vector<uint8_t> before = d.outputs_snapshot();
  const int rc = call();
  const std::string msg = rc == FLASHBOX_OK ? std::string() : flashbox_last_error();
  EXPECT_EQ(msg.find("CUDA kernels do not take"), std::string::npos) << field << ": " << msg;
  if (rc != FLASHBOX_OK) {
    EXPECT_TRUE(before == d.outputs_snapshot()) << "a refused call wrote an output";
  }
}

// Forward and backward of both CPU levels (naive, blocked) through the extension against the fp64
// reference: o and lse of the rows a forward writes (the rows past seqused_q left as they were), then
// dq, dk and dv in both deterministic modes (NaN never passes; fp32 gradients within 10x the forward's
// bound, bf16 within it).
inline void check_cpu_levels(MaskCase c, bool backward = true) {
  MaskData d(std::move(c));
  SCOPED_TRACE(d.name());
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
    SCOPED_TRACE(flashbox_impl_name(impl));
    ASSERT_EQ(d.forward(impl), FLASHBOX_OK) << flashbox_last_error();
    const Error o = d.o_error();
    EXPECT_FALSE(o.nan) << "o holds NaN in a row the forward writes (an element was not written)";
    EXPECT_LT(o.rel, d.tolerance());
    EXPECT_LT(d.lse_error(), d.config().dtype == FLASHBOX_FLOAT32 ? 1e-4 : 1e-3);
    EXPECT_TRUE(d.unused_outputs_untouched()) << "the forward wrote a query row past seqused_q";
    if (!backward) continue;
    for (int deterministic : {0, 1}) {
      SCOPED_TRACE("deterministic " + std::to_string(deterministic));
      ASSERT_EQ(d.backward(impl, deterministic), FLASHBOX_OK) << flashbox_last_error();
      const char *names[3] = {"dq", "dk", "dv"};
      const Error e[3] = {d.dq_error(), d.dk_error(), d.dv_error()};
      for (int i = 0; i < 3; ++i) {
        EXPECT_FALSE(e[i].nan) << names[i] << " holds NaN (an element was not written)";
        EXPECT_LT(e[i].rel, d.tolerance() * (d.config().dtype == FLASHBOX_FLOAT32 ? 10 : 1)) << names[i];
      }
      if (d.config().sink) {
        EXPECT_LT(d.dsink_error(), d.tolerance() * 10) << "dsink";
      }
    }
  }
}

}  // namespace flashbox::test
