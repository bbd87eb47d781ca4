// The fp64 reference backward is itself checked against central finite differences of the fp64
// reference forward's loss L = Σ dout ∘ O(q, k, v), at tiny sizes, every input element perturbed.
#include <gtest/gtest.h>

#include <cmath>

#include "backward_case.hpp"
#include "cpu/reference_fp64.hpp"

namespace flashbox::test {
namespace {

double loss(const flashbox_attention_args &a, const std::vector<double> &dout_dense) {
  std::vector<double> out;
  cpu::reference_attention_fp64(a, out, nullptr);
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += out[i] * dout_dense[i];
  return l;
}

// Dense [b, t, h, d] copy of a strided fp32 tensor.
std::vector<double> dense(const float *base, const TensorShape &s, int64_t B, int64_t T, int64_t H, int64_t D) {
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t x = 0; x < D; ++x) out.push_back(base[b * s.stride[0] + t * s.stride[1] + h * s.stride[2] + x]);
  return out;
}

void check_finite_differences(const AttentionCase &c) {
  BackwardData d(c);
  const flashbox_attention_args &a = d.forward().args;
  const TensorShape qs = d.forward().q_shape(), ks = d.forward().k_shape();
  const std::vector<double> dout =
      dense(static_cast<const float *>(d.grad.dout), qs, c.batch, c.seqlen_q, c.heads_q, c.head_dim);
  std::vector<double> dq, dk, dv;
  cpu::reference_attention_backward_fp64(d.grad, dq, dk, dv);

  struct Input {
    const char *name;
    float *base;
    TensorShape shape;
    int64_t seq, heads;
    const std::vector<double> *grad;
  };
  const Input inputs[] = {
      {"q", reinterpret_cast<float *>(d.forward().q_bytes().data()), qs, c.seqlen_q, c.heads_q, &dq},
      {"k", reinterpret_cast<float *>(d.forward().k_bytes().data()), ks, c.seqlen_k, c.heads_kv, &dk},
      {"v", reinterpret_cast<float *>(d.forward().v_bytes().data()), ks, c.seqlen_k, c.heads_kv, &dv}};
  const float h = 1e-3f;
  for (const Input &in : inputs) {
    double err2 = 0, ref2 = 0;
    size_t n = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t t = 0; t < in.seq; ++t)
        for (int64_t hh = 0; hh < in.heads; ++hh)
          for (int64_t x = 0; x < c.head_dim; ++x, ++n) {
            float &e = in.base[b * in.shape.stride[0] + t * in.shape.stride[1] + hh * in.shape.stride[2] + x];
            const float orig = e;
            const float up = orig + h, down = orig - h;
            e = up;
            const double l_up = loss(a, dout);
            e = down;
            const double l_down = loss(a, dout);
            e = orig;
            // The step actually taken (fp32 rounding of orig +- h), so rounding adds no error.
            const double fd = (l_up - l_down) / (double(up) - double(down));
            const double g = (*in.grad)[n];
            err2 += (fd - g) * (fd - g);
            ref2 += g * g;
          }
    ASSERT_GT(ref2, 0.0) << in.name << ": gradient is all zero, the check would prove nothing";
    EXPECT_LT(std::sqrt(err2 / ref2), 1e-5) << "d" << in.name << " vs finite differences: " << d.name();
  }
}

TEST(ReferenceBackward, MatchesFiniteDifferences) {
  check_finite_differences({.batch = 1, .seqlen_q = 3, .seqlen_k = 5, .heads_q = 2, .heads_kv = 1, .head_dim = 4});
}

TEST(ReferenceBackward, MatchesFiniteDifferencesCausalGqaScaled) {
  check_finite_differences({.batch = 2,
                            .seqlen_q = 4,
                            .seqlen_k = 3,
                            .heads_q = 4,
                            .heads_kv = 2,
                            .head_dim = 3,
                            .causal = 1,
                            .layout = Layout::PADDED,
                            .softmax_scale = 0.7f});
}

TEST(ReferenceBackward, MatchesFiniteDifferencesCausalLongerKeys) {
  check_finite_differences({.batch = 1,
                            .seqlen_q = 3,
                            .seqlen_k = 6,
                            .heads_q = 3,
                            .heads_kv = 1,
                            .head_dim = 5,
                            .causal = 1,
                            .layout = Layout::BHTD});
}

}  // namespace
}  // namespace flashbox::test
