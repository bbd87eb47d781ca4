// The fp64 reference backward with a sliding window, softcap (its 1 - tanh^2 factor) and ALiBi,
// checked against central finite differences of the fp64 reference forward's loss
// L = sum dout * O(q, k, v) at tiny sizes, every input element perturbed (seed printed).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/masks.hpp"
#include "cpu/reference_backward_fp64.hpp"
#include "cpu/reference_fp64.hpp"
#include "support/attention_case.hpp"

namespace {

struct Dense {
  int64_t B = 2, SQ = 5, SK = 7, HQ = 2, HKV = 1, D = 4;
  std::vector<float> q, k, v, dout;
  flashbox_attention_args args() {
    flashbox_attention_args a{};
    a.device = FLASHBOX_CPU, a.dtype = FLASHBOX_FLOAT32;
    a.batch = B, a.seqlen_q = SQ, a.seqlen_k = SK, a.heads_q = HQ, a.heads_kv = HKV, a.head_dim = D;
    a.q = q.data(), a.k = k.data(), a.v = v.data();
    const int64_t qs[3] = {SQ * HQ * D, HQ * D, D}, ks[3] = {SK * HKV * D, HKV * D, D};
    std::copy_n(qs, 3, a.q_stride), std::copy_n(ks, 3, a.k_stride), std::copy_n(ks, 3, a.v_stride);
    return a;
  }
};

double loss(Dense &x, const flashbox::core::ScoreMods &m) {
  std::vector<double> out;
  flashbox::cpu::reference_attention_fp64(x.args(), out, nullptr, &m);
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += out[i] * x.dout[i];
  return l;
}

void check(flashbox::core::ScoreMods m, uint64_t seed) {
  Dense x;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  for (auto *t : {&x.q, &x.dout}) t->resize(size_t(x.B * x.SQ * x.HQ * x.D));
  for (auto *t : {&x.k, &x.v}) t->resize(size_t(x.B * x.SK * x.HKV * x.D));
  for (auto *t : {&x.q, &x.k, &x.v, &x.dout})
    for (float &e : *t) e = 1.5f * n(rng);                // scores large enough for the softcap to bend them
  std::vector<float> slopes = {0.25f, 0.7f, 0.1f, 0.4f};  // [batch 2, heads 2]
  if (m.alibi_slopes) m.alibi_slopes = slopes.data(), m.alibi_batch_stride = 2;

  flashbox_attention_grad_args g{};
  g.fwd = x.args();
  g.dout = x.dout.data();
  std::copy_n(g.fwd.q_stride, 3, g.dout_stride);
  std::vector<double> dq, dk, dv;
  flashbox::cpu::reference_attention_backward_fp64(g, dq, dk, dv, &m);

  const double h = 1e-3;
  const std::pair<std::vector<float> *, std::vector<double> *> inputs[] = {{&x.q, &dq}, {&x.k, &dk}, {&x.v, &dv}};
  const char *names[] = {"dq", "dk", "dv"};
  for (int w = 0; w < 3; ++w) {
    auto [in, grad] = inputs[w];
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < in->size(); ++i) {
      const float orig = (*in)[i];
      const float up = float(orig + h), down = float(orig - h);
      (*in)[i] = up;
      const double lu = loss(x, m);
      (*in)[i] = down;
      const double ld = loss(x, m);
      (*in)[i] = orig;
      const double fd = (lu - ld) / (double(up) - double(down));
      err2 += (fd - (*grad)[i]) * (fd - (*grad)[i]), ref2 += fd * fd;
    }
    EXPECT_LT(std::sqrt(err2 / std::max(ref2, 1e-300)), 1e-5)
        << names[w] << " window " << m.window_left << "," << m.window_right << " softcap " << m.softcap
        << (m.alibi_slopes ? " alibi" : "") << " seed " << seed;
  }
}

TEST(MasksReference, BackwardMatchesFiniteDifferences) {
  const uint64_t seed = flashbox::test::fresh_seed();
  flashbox::core::ScoreMods m;
  check(m, seed);  // plain
  m.softcap = 1.5f;
  check(m, seed + 1);
  m.window_left = 2, m.window_right = 1;
  check(m, seed + 2);
  m.alibi_slopes = reinterpret_cast<const float *>(1);  // replaced by check() with its slope table
  check(m, seed + 3);
  m.softcap = 0.0f, m.window_left = -1, m.window_right = 0;
  check(m, seed + 4);
}

}  // namespace
