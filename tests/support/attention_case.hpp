// Test support shared by every attention test (CPU, API, CUDA): one shape + layout + dtype + seed
// becomes host buffers of fresh seeded random data, a filled flashbox_attention_args, poisoned
// outputs, and the comparison against the fp64 reference.
//
// Usage:
//   AttentionCase c{.batch = 2, .seqlen_q = 65, ...};       // c.seed = fresh_seed() by default
//   AttentionData d(c);                                        // random q/k/v, poisoned o/lse
//   ASSERT_EQ(flashbox_attention_forward(&d.args), 0) << d.name();
//   auto r = d.compare();  EXPECT_LT(r.rel_error, tol) << d.name();
// A CUDA test copies d.q_bytes()/k/v to the device, points a copy of d.args at device memory, and
// copies the device o/lse back into d.o_bytes()/d.lse before calling d.compare().
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "cpu/reference_fp64.hpp"
#include "flashbox/flashbox.h"
#include "support/output_error.hpp"

namespace flashbox::test {

// A value outside a C enum's range, written as the int a C caller would store (not loaded as a C++
// enum: that is undefined behaviour).
template <class Field>
void store_int(Field &field, int value) {
  static_assert(sizeof(Field) == sizeof(int));
  std::memcpy(&field, &value, sizeof value);
}

enum class Layout {
  BTHD,    // [batch, seq, head, dim], dense
  BHTD,    // [batch, head, seq, dim], dense
  PADDED,  // BTHD with gaps after every head row, every seq row and every batch (a slice of a bigger tensor)
};

inline const char *layout_name(Layout l) {
  switch (l) {
    case Layout::BTHD: return "bthd";
    case Layout::BHTD: return "bhtd";
    case Layout::PADDED: return "padded";
  }
  return "?";
}

// A fresh seed per run (so every run tests new data); FLASHBOX_TEST_SEED=N reproduces a failure.
inline uint64_t fresh_seed() {
  if (const char *s = std::getenv("FLASHBOX_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static uint64_t counter = 0;
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd()) ^
         uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^ (++counter * 0x9e3779b97f4a7c15ull);
}

struct AttentionCase {
  int64_t batch = 1, seqlen_q = 64, seqlen_k = 64, heads_q = 2, heads_kv = 2, head_dim = 64;
  int64_t head_dim_v = 0;  // V's and O's head dim (flashbox_attention_ext's head_dim_v); 0: head_dim
  flashbox_dtype dtype = FLASHBOX_FLOAT32;
  int causal = 0;
  Layout layout = Layout::BTHD;
  float softmax_scale = 0.0f;
  flashbox_device device = FLASHBOX_CPU;
  flashbox_impl impl = FLASHBOX_AUTO;
  bool uniform = false;  // inputs uniform in [-1, 1) instead of standard normal
  bool qv = false;       // a qv input (flashbox_attention_ext's), [.., heads_q, head_dim_v] in q's layout
  uint64_t seed = fresh_seed();
};

// Element strides (batch, seq, head) and the buffer length in elements for one tensor.
struct TensorShape {
  int64_t stride[3];
  int64_t elements;
};

inline TensorShape make_shape(Layout l, int64_t b, int64_t t, int64_t h, int64_t d) {
  TensorShape s{};
  switch (l) {
    case Layout::BTHD: s.stride[2] = d, s.stride[1] = h * d, s.stride[0] = t * h * d; break;
    case Layout::BHTD: s.stride[1] = d, s.stride[2] = t * d, s.stride[0] = h * t * d; break;
    case Layout::PADDED: {
      // Gaps are multiples of 8 elements so 16-byte alignment holds for every dtype.
      const int64_t dpad = (d + 7) / 8 * 8 + 8;
      s.stride[2] = dpad, s.stride[1] = h * dpad + 8, s.stride[0] = t * s.stride[1] + 16;
      break;
    }
  }
  s.elements =
      (b - 1) * s.stride[0] + (t - 1) * s.stride[1] + (h - 1) * s.stride[2] + d + (l == Layout::PADDED ? 8 : 0);
  return s;
}

struct Comparison {
  double rel_error = 0;          // ||o - ref|| / ||ref|| over O (inf when O holds a NaN)
  double max_abs_error = 0;      // max |o - ref| over O
  double lse_max_abs_error = 0;  // over rows with finite reference LSE; inf if a row disagrees on -inf or is NaN
  bool has_nan = false;          // any NaN/inf in O or NaN in LSE
  bool lse_checked = false;
};

class AttentionData {
 public:
  explicit AttentionData(const AttentionCase &c) : c_(c) {
    const int64_t es = cpu::dtype_size(c.dtype);
    qs_ = make_shape(c.layout, c.batch, c.seqlen_q, c.heads_q, c.head_dim);
    ks_ = make_shape(c.layout, c.batch, c.seqlen_k, c.heads_kv, c.head_dim);
    vs_ = make_shape(c.layout, c.batch, c.seqlen_k, c.heads_kv, dv());
    os_ = make_shape(c.layout, c.batch, c.seqlen_q, c.heads_q, dv());
    q_.resize(size_t(qs_.elements * es));
    k_.resize(size_t(ks_.elements * es));
    v_.resize(size_t(vs_.elements * es));
    o_.resize(size_t(os_.elements * es));
    lse.resize(size_t(c.batch * c.heads_q * c.seqlen_q));
    std::mt19937_64 rng(c.seed);
    fill_random(q_, qs_.elements, rng);
    fill_random(k_, ks_.elements, rng);
    fill_random(v_, vs_.elements, rng);
    if (c.qv) {
      qvs_ = make_shape(c.layout, c.batch, c.seqlen_q, c.heads_q, dv());
      qv_.resize(size_t(qvs_.elements * es));
      fill_random(qv_, qvs_.elements, rng);
    }
    poison();

    args = flashbox_attention_args{};
    args.device = c.device, args.dtype = c.dtype, args.impl = c.impl;
    args.batch = c.batch, args.seqlen_q = c.seqlen_q, args.seqlen_k = c.seqlen_k;
    args.heads_q = c.heads_q, args.heads_kv = c.heads_kv, args.head_dim = c.head_dim;
    args.q = q_.data(), args.k = k_.data(), args.v = v_.data(), args.o = o_.data();
    args.lse = lse.data();
    std::copy_n(qs_.stride, 3, args.q_stride);
    std::copy_n(ks_.stride, 3, args.k_stride);
    std::copy_n(vs_.stride, 3, args.v_stride);
    std::copy_n(os_.stride, 3, args.o_stride);
    args.softmax_scale = c.softmax_scale;
    args.causal = c.causal;
  }
  AttentionData(const AttentionData &) = delete;
  AttentionData &operator=(const AttentionData &) = delete;

  // "b2_sq65_sk65_hq4_hkv2_d64_bf16_causal_bthd_seed123": printed with every failure.
  std::string name() const {
    return "b" + std::to_string(c_.batch) + "_sq" + std::to_string(c_.seqlen_q) + "_sk" + std::to_string(c_.seqlen_k) +
           "_hq" + std::to_string(c_.heads_q) + "_hkv" + std::to_string(c_.heads_kv) + "_d" +
           std::to_string(c_.head_dim) + (c_.head_dim_v ? "_dv" + std::to_string(c_.head_dim_v) : "") + "_" +
           cpu::dtype_name(c_.dtype) + (c_.causal ? "_causal_" : "_full_") + layout_name(c_.layout) +
           (c_.softmax_scale != 0 ? "_scale" + std::to_string(c_.softmax_scale) : "") + (c_.qv ? "_qv" : "") + "_seed" +
           std::to_string(c_.seed) + " (rerun with FLASHBOX_TEST_SEED=" + std::to_string(c_.seed) + ")";
  }

  // Fills o (every byte, padding included) and lse with NaN so an unwritten element cannot pass.
  void poison() {
    const uint8_t pattern[2] = {0xff, 0x7f};  // fp32 0x7fff7fff, fp16/bf16 0x7fff: NaN in each dtype
    for (size_t i = 0; i < o_.size(); ++i) o_[i] = pattern[i & 1];
    std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
  }

  // The fp64 reference for the current inputs (computed once, cached).
  const std::vector<double> &reference_out() {
    if (ref_out_.empty()) {
      const cpu::QvInput qv{qv_.data(), qvs_.stride};
      cpu::reference_attention_fp64(args_for_reference(), ref_out_, &ref_lse_, nullptr, dv(), c_.qv ? &qv : nullptr);
    }
    return ref_out_;
  }
  const std::vector<double> &reference_lse() {
    reference_out();
    return ref_lse_;
  }

  // O as dense [b, sq, hq, dv] doubles, read from o through its strides.
  std::vector<double> output_dense() const {
    std::vector<double> out(size_t(c_.batch * c_.seqlen_q * c_.heads_q * dv()));
    size_t n = 0;
    for (int64_t b = 0; b < c_.batch; ++b)
      for (int64_t i = 0; i < c_.seqlen_q; ++i)
        for (int64_t h = 0; h < c_.heads_q; ++h) {
          const int64_t off = b * os_.stride[0] + i * os_.stride[1] + h * os_.stride[2];
          for (int64_t x = 0; x < dv(); ++x) out[n++] = cpu::load_as_float(o_.data(), c_.dtype, off + x);
        }
    return out;
  }

  // Compares o (and lse when check_lse) with the fp64 reference.
  Comparison compare(bool check_lse = true) {
    const std::vector<double> &ref = reference_out();
    const std::vector<double> out = output_dense();
    Comparison r;
    const RelError e = rel_error(out, ref);
    r.has_nan = e.nan;
    r.rel_error = e.rel;
    r.max_abs_error = e.max_abs;
    if (r.has_nan || std::isnan(r.rel_error)) {
      r.rel_error = std::numeric_limits<double>::infinity();
      r.max_abs_error = std::numeric_limits<double>::infinity();
    }
    if (check_lse) {
      r.lse_checked = true;
      const std::vector<double> &rl = reference_lse();
      for (size_t i = 0; i < rl.size(); ++i) {
        const double got = lse[i];
        if (std::isnan(got)) {
          r.has_nan = true;
          r.lse_max_abs_error = std::numeric_limits<double>::infinity();
        } else if (std::isinf(rl[i]) || std::isinf(got)) {
          if (got != rl[i]) r.lse_max_abs_error = std::numeric_limits<double>::infinity();
        } else {
          r.lse_max_abs_error = std::max(r.lse_max_abs_error, std::abs(got - rl[i]));
        }
      }
    }
    return r;
  }

  // True when every byte of o outside the tensor's elements (the padding) still holds the poison.
  bool o_padding_untouched() const {
    std::vector<char> inside(size_t(os_.elements), 0);
    for (int64_t b = 0; b < c_.batch; ++b)
      for (int64_t i = 0; i < c_.seqlen_q; ++i)
        for (int64_t h = 0; h < c_.heads_q; ++h) {
          const int64_t off = b * os_.stride[0] + i * os_.stride[1] + h * os_.stride[2];
          std::fill_n(inside.begin() + off, dv(), 1);
        }
    const int64_t es = cpu::dtype_size(c_.dtype);
    const uint8_t pattern[2] = {0xff, 0x7f};
    for (int64_t e = 0; e < os_.elements; ++e) {
      if (inside[size_t(e)]) continue;
      for (int64_t byte = e * es; byte < (e + 1) * es; ++byte)
        if (o_[size_t(byte)] != pattern[byte & 1]) return false;
    }
    return true;
  }

  // Raw host buffers (for cudaMemcpy) and their layouts.
  std::vector<uint8_t> &q_bytes() { return q_; }
  std::vector<uint8_t> &k_bytes() { return k_; }
  std::vector<uint8_t> &v_bytes() { return v_; }
  std::vector<uint8_t> &o_bytes() { return o_; }
  std::vector<uint8_t> &qv_bytes() { return qv_; }  // empty without config().qv
  const TensorShape &qv_shape() const { return qvs_; }
  const TensorShape &q_shape() const { return qs_; }
  const TensorShape &k_shape() const { return ks_; }
  const TensorShape &v_shape() const { return vs_; }
  const TensorShape &o_shape() const { return os_; }
  const AttentionCase &config() const { return c_; }
  double tolerance() const { return c_.dtype == FLASHBOX_FLOAT32 ? 1e-5 : 1e-2; }
  // The bound on LSE's absolute error. LSE is fp32 from fp32 arithmetic whatever the input dtype, so
  // the bound grows with its magnitude past 10 (a few fp32 ulps of an LSE of 300 are 1e-4; one seed
  // in about fifty went over a fixed 1e-4, seen under the sanitizer build).
  double lse_tolerance() {
    double magnitude = 0;
    for (double v : reference_lse())
      if (std::isfinite(v)) magnitude = std::max(magnitude, std::abs(v));
    return (c_.dtype == FLASHBOX_FLOAT32 ? 1e-4 : 1e-3) * std::max(1.0, magnitude / 10);
  }
  // V's and O's head dim: head_dim_v, or head_dim when it is 0.
  int64_t dv() const { return c_.head_dim_v ? c_.head_dim_v : c_.head_dim; }

  flashbox_attention_args args{};  // host pointers; a test may edit it (e.g. to point at device memory)
  std::vector<float> lse;          // [batch, heads_q, seqlen_q]

 private:
  void fill_random(std::vector<uint8_t> &buf, int64_t n, std::mt19937_64 &rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i)
      cpu::store_from_float(buf.data(), c_.dtype, i, c_.uniform ? uniform(rng) : normal(rng));
  }

  // The reference reads the host inputs even when args was pointed at device memory.
  flashbox_attention_args args_for_reference() const {
    flashbox_attention_args a = args;
    a.q = q_.data(), a.k = k_.data(), a.v = v_.data();
    std::copy_n(qs_.stride, 3, a.q_stride);
    std::copy_n(ks_.stride, 3, a.k_stride);
    std::copy_n(vs_.stride, 3, a.v_stride);
    return a;
  }

  AttentionCase c_;
  TensorShape qs_{}, ks_{}, vs_{}, os_{}, qvs_{};
  std::vector<uint8_t> q_, k_, v_, o_, qv_;
  std::vector<double> ref_out_, ref_lse_;
};

}  // namespace flashbox::test
