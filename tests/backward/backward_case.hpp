// Test support for the backward: one AttentionCase becomes the forward's inputs (q, k, v), its outputs
// O and LSE taken from the fp64 reference (so the backward is tested independently of any forward
// implementation), a fresh seeded random dout, poisoned dq/dk/dv buffers in the case's layout, a filled
// flashbox_attention_grad_args, and the comparison of the three gradients with the fp64 reference
// backward.
//
//   BackwardData d(AttentionCase{.seqlen_q = 65, .dtype = FLASHBOX_BFLOAT16});
//   ASSERT_EQ(flashbox_attention_backward(&d.grad), 0) << d.name() << flashbox_last_error();
//   d.expect_close();
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/reference_backward_fp64.hpp"
#include "support/attention_case.hpp"

namespace flashbox::test {

struct GradError {
  double rel = 0, max_abs = 0;
  bool has_nan = false;
};

class BackwardData {
 public:
  explicit BackwardData(const AttentionCase &c) : c_(c), fwd_(c) {
    const int64_t es = cpu::dtype_size(c.dtype);
    qs_ = fwd_.q_shape(), ks_ = fwd_.k_shape();
    dout_.resize(fwd_.q_bytes().size());
    dq_.resize(size_t(qs_.elements * es));
    dk_.resize(size_t(ks_.elements * es));
    dv_.resize(size_t(ks_.elements * es));
    // O and LSE from the fp64 reference, rounded to the dtype / fp32 as a forward would write them.
    const std::vector<double> &o = fwd_.reference_out();
    const std::vector<double> &lse = fwd_.reference_lse();
    size_t n = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t i = 0; i < c.seqlen_q; ++i)
        for (int64_t h = 0; h < c.heads_q; ++h)
          for (int64_t x = 0; x < c.head_dim; ++x)
            cpu::store_from_float(fwd_.o_bytes().data(), c.dtype, offset(qs_, b, i, h) + x, float(o[n++]));
    for (size_t i = 0; i < lse.size(); ++i) fwd_.lse[i] = float(lse[i]);
    // dout: same layout as q, every element (padding too) random so unread padding is never zero.
    std::mt19937_64 rng(c.seed ^ 0x5bd1e995u);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < qs_.elements; ++i) cpu::store_from_float(dout_.data(), c.dtype, i, normal(rng));
    poison();

    grad = flashbox_attention_grad_args{};
    grad.fwd = fwd_.args;
    grad.dout = dout_.data();
    grad.dq = dq_.data(), grad.dk = dk_.data(), grad.dv = dv_.data();
    std::copy_n(qs_.stride, 3, grad.dout_stride);
    std::copy_n(qs_.stride, 3, grad.dq_stride);
    std::copy_n(ks_.stride, 3, grad.dk_stride);
    std::copy_n(ks_.stride, 3, grad.dv_stride);
  }
  BackwardData(const BackwardData &) = delete;
  BackwardData &operator=(const BackwardData &) = delete;

  std::string name() const { return "backward " + fwd_.name(); }

  // NaN in every byte pattern of dq/dk/dv, padding included.
  void poison() {
    for (auto *buf : {&dq_, &dk_, &dv_})
      for (size_t i = 0; i < buf->size(); ++i) (*buf)[i] = kPoison[i & 1];
  }

  // Relative errors of dq, dk, dv against the fp64 reference (inf when a gradient holds NaN/inf).
  std::vector<GradError> compare() {
    if (ref_dq_.empty()) {
      flashbox_attention_grad_args host = grad;
      host.fwd = fwd_.args;
      host.fwd.q = fwd_.q_bytes().data(), host.fwd.k = fwd_.k_bytes().data(), host.fwd.v = fwd_.v_bytes().data();
      std::copy_n(qs_.stride, 3, host.fwd.q_stride);
      std::copy_n(ks_.stride, 3, host.fwd.k_stride);
      std::copy_n(ks_.stride, 3, host.fwd.v_stride);
      host.dout = dout_.data();
      std::copy_n(qs_.stride, 3, host.dout_stride);
      cpu::reference_attention_backward_fp64(host, ref_dq_, ref_dk_, ref_dv_);
    }
    return {error(dq_, qs_, c_.seqlen_q, c_.heads_q, ref_dq_), error(dk_, ks_, c_.seqlen_k, c_.heads_kv, ref_dk_),
            error(dv_, ks_, c_.seqlen_k, c_.heads_kv, ref_dv_)};
  }

  // Asserts every gradient is within the dtype's tolerance and nothing outside them was written.
  void expect_close(double tol = -1) {
    if (tol < 0) tol = fwd_.tolerance();
    const char *names[3] = {"dq", "dk", "dv"};
    const std::vector<GradError> e = compare();
    for (int i = 0; i < 3; ++i) {
      EXPECT_FALSE(e[size_t(i)].has_nan) << names[i] << " holds NaN/inf: " << name();
      EXPECT_LT(e[size_t(i)].rel, tol) << names[i] << " rel error " << e[size_t(i)].rel << " (max abs "
                                       << e[size_t(i)].max_abs << "): " << name();
    }
    EXPECT_TRUE(padding_untouched()) << "bytes outside dq/dk/dv were written: " << name();
  }

  // True when every byte of dq/dk/dv outside the tensors' elements still holds the poison.
  bool padding_untouched() const {
    return untouched(dq_, qs_, c_.seqlen_q, c_.heads_q) && untouched(dk_, ks_, c_.seqlen_k, c_.heads_kv) &&
           untouched(dv_, ks_, c_.seqlen_k, c_.heads_kv);
  }

  std::vector<uint8_t> &dout_bytes() { return dout_; }
  std::vector<uint8_t> &dq_bytes() { return dq_; }
  std::vector<uint8_t> &dk_bytes() { return dk_; }
  std::vector<uint8_t> &dv_bytes() { return dv_; }
  AttentionData &forward() { return fwd_; }
  const AttentionCase &config() const { return c_; }

  flashbox_attention_grad_args grad{};  // host pointers; a CUDA test points a copy at device memory

 private:
  static constexpr uint8_t kPoison[2] = {0xff, 0x7f};

  static int64_t offset(const TensorShape &s, int64_t b, int64_t t, int64_t h) {
    return b * s.stride[0] + t * s.stride[1] + h * s.stride[2];
  }

  GradError error(const std::vector<uint8_t> &buf, const TensorShape &s, int64_t seq, int64_t heads,
                  const std::vector<double> &ref) const {
    // ref is dense [batch, seq, heads, head_dim]; element n of it sits at these strides in buf.
    const auto at = [&](size_t n) {
      const int64_t i = int64_t(n), x = i % c_.head_dim, h = i / c_.head_dim % heads,
                    t = i / (c_.head_dim * heads) % seq, b = i / (c_.head_dim * heads * seq);
      return double(cpu::load_as_float(buf.data(), c_.dtype, offset(s, b, t, h) + x));
    };
    const RelError e = rel_error_of(at, ref);
    GradError r{e.rel, e.max_abs, e.nan};
    if (r.has_nan || std::isnan(r.rel)) r.rel = r.max_abs = std::numeric_limits<double>::infinity();
    return r;
  }

  bool untouched(const std::vector<uint8_t> &buf, const TensorShape &s, int64_t seq, int64_t heads) const {
    std::vector<char> inside(size_t(s.elements), 0);
    for (int64_t b = 0; b < c_.batch; ++b)
      for (int64_t t = 0; t < seq; ++t)
        for (int64_t h = 0; h < heads; ++h) std::fill_n(inside.begin() + offset(s, b, t, h), c_.head_dim, 1);
    const int64_t es = cpu::dtype_size(c_.dtype);
    for (int64_t e = 0; e < s.elements; ++e) {
      if (inside[size_t(e)]) continue;
      for (int64_t byte = e * es; byte < (e + 1) * es; ++byte)
        if (buf[size_t(byte)] != kPoison[byte & 1]) return false;
    }
    return true;
  }

  AttentionCase c_;
  AttentionData fwd_;
  TensorShape qs_{}, ks_{};
  std::vector<uint8_t> dout_, dq_, dk_, dv_;
  std::vector<double> ref_dq_, ref_dk_, ref_dv_;
};

}  // namespace flashbox::test
