// Which kernel family and instantiation takes a head_dim, decided by the planners alone (no device
// work, so these run on a machine without a GPU too): the sm80 forward and backward take every
// multiple of 8 up to 256 (d64 / d128 / d256 instantiations), nothing above; the sm90 forward keeps
// 64, 128 and plain (or windowed) 256 and declines the rest to sm80 (d192, d256 with softcap, ALiBi
// or varlen); the sm90 backward keeps 64 and 128.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/backends.hpp"
#include "core/masks.hpp"
#include "core/problem.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::test {
namespace {

// A validated-looking bf16 problem (dense [batch, seq, heads, head_dim]); the pointers are never read.
struct PlanCase {
  explicit PlanCase(int64_t d, int64_t seq = 64) {
    a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16, a.impl = FLASHBOX_AUTO;
    a.batch = 2, a.seqlen_q = a.seqlen_k = seq, a.heads_q = 4, a.heads_kv = 2, a.head_dim = d;
    buf.assign(size_t(a.batch * seq * a.heads_q * d), 0);
    a.q = a.k = a.v = buf.data(), a.o = buf.data();
    a.lse = lse.data();
    const int64_t qs[3] = {seq * a.heads_q * d, a.heads_q * d, d}, ks[3] = {seq * a.heads_kv * d, a.heads_kv * d, d};
    std::copy_n(qs, 3, a.q_stride), std::copy_n(qs, 3, a.o_stride);
    std::copy_n(ks, 3, a.k_stride), std::copy_n(ks, 3, a.v_stride);
  }
  detail::GradProblem grad(int deterministic) const {
    flashbox_attention_grad_args g{};
    g.fwd = a;
    g.dout = buf.data(), g.dq = const_cast<uint16_t *>(buf.data()), g.dk = g.dq, g.dv = g.dq;
    std::copy_n(a.q_stride, 3, g.dout_stride), std::copy_n(a.q_stride, 3, g.dq_stride);
    std::copy_n(a.k_stride, 3, g.dk_stride), std::copy_n(a.k_stride, 3, g.dv_stride);
    g.deterministic = deterministic;
    return detail::make_grad_problem(g);
  }
  flashbox_attention_args a{};
  std::vector<uint16_t> buf;
  std::vector<float> lse = std::vector<float>(1024);
};

TEST(HeadDimPlan, Sm80ForwardTakesMultiplesOf8UpTo256) {
  for (int64_t d : {8, 64, 72, 128, 136, 160, 192, 224, 248, 256}) {
    const PlanCase c(d);
    const detail::PlanResult r = detail::plan_sm80_forward(detail::make_problem(c.a));
    ASSERT_TRUE(r.plan.has_value()) << "d" << d << ": " << r.why_not;
    const std::string want = d <= 64 ? "cuda_flash_sm80_d64_" : d <= 128 ? "cuda_flash_sm80_d128_" : "cuda_flash_sm80_d256_128x32";
    EXPECT_EQ(r.plan->kernel.rfind(want, 0), 0u) << "d" << d << ": " << r.plan->kernel;
  }
  const PlanCase c(264);
  const detail::PlanResult r = detail::plan_sm80_forward(detail::make_problem(c.a));
  EXPECT_FALSE(r.plan.has_value());
  EXPECT_NE(r.why_not.find("up to 256 in multiples of 8 (got 264)"), std::string::npos) << r.why_not;
}

TEST(HeadDimPlan, Sm80BackwardTakesMultiplesOf8UpTo256) {
  for (int64_t d : {64, 128, 136, 192, 256})
    for (int det : {0, 1}) {
      const PlanCase c(d);
      const detail::PlanResult r = detail::plan_sm80_backward(c.grad(det));
      ASSERT_TRUE(r.plan.has_value()) << "d" << d << ": " << r.why_not;
      const int kd = d <= 64 ? 64 : d <= 128 ? 128 : 256;
      EXPECT_EQ(r.plan->kernel, "cuda_flash_bwd_sm80_d" + std::to_string(kd) + (det ? "_deterministic" : ""));
      // Scratch: D = rowsum(dO * O) (4 B a row) and, atomic, the fp32 dQ accumulator of the
      // instantiation's width.
      const int64_t rows = c.a.batch * c.a.heads_q * c.a.seqlen_q;
      EXPECT_EQ(r.plan->workspace_bytes, rows * 4 + (det ? 0 : rows * kd * 4)) << "d" << d;
    }
  const PlanCase c(264);
  const detail::PlanResult r = detail::plan_sm80_backward(c.grad(0));
  EXPECT_FALSE(r.plan.has_value());
  EXPECT_NE(r.why_not.find("up to 256 in multiples of 8 (got 264)"), std::string::npos) << r.why_not;
}

#ifdef FLASHBOX_HAVE_SM90
// What the Hopper families decline above 128 is what auto hands to sm80 (family_choice.hpp).
TEST(HeadDimPlan, Sm90DeclinesWhatSm80TakesAbove128) {
  {
    const PlanCase c(192);
    const detail::PlanResult r = detail::plan_sm90_forward(detail::make_problem(c.a));
    EXPECT_FALSE(r.plan.has_value());
    EXPECT_EQ(r.code, 0) << "a decline, not an error: auto goes on to sm80";
  }
  {
    const PlanCase c(256);
    core::ScoreMods m = core::causal_mods(false);
    m.softcap = 30.0f;
    const detail::PlanResult r = detail::plan_sm90_forward(detail::make_problem(c.a, m));
    EXPECT_FALSE(r.plan.has_value());
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.why_not.find("no softcap or ALiBi for head_dim 256"), std::string::npos) << r.why_not;
  }
  for (int64_t d : {160, 256}) {
    const PlanCase c(d);
    const detail::PlanResult r = detail::plan_sm90_backward(c.grad(0), /*size_only=*/true);
    EXPECT_FALSE(r.plan.has_value()) << "d" << d;
    EXPECT_EQ(r.code, 0) << "d" << d;
  }
}
#endif

}  // namespace
}  // namespace flashbox::test
