// Which kernel family and instantiation takes a head_dim, decided by the planners alone (no device
// work, so these run on a machine without a GPU too): the sm80 forward and backward take every
// multiple of 8 up to 256 (d64 / d128 / d256 instantiations), nothing above; so does the sm90
// forward (d64 / d96 / d128 / d192 / d256), except softcap, ALiBi and varlen above 128, which it declines
// to sm80; the sm90 backward takes every multiple of 8 up to 256 on the next instantiation up too
// (d32 for 8..32, d64 for 40..64, d96 for 72..96, d128 for 104..128, d192 for 136..192, d256 above;
// branch paddims added 8..56 and 104..120, and varlen at 72..96; branch d32bwd the d32 kernel, with
// deterministic bf16 GQA at 8..32 left on d64), neither deterministic nor varlen above 128.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/backends.hpp"
#include "core/masks.hpp"
#include "core/problem.hpp"
#include "cuda/backward/sm80/tile_policy.hpp"
#ifdef FLASHBOX_HAVE_SM90
#include "cuda/forward/sm90/tile_policy.hpp"
#include "cuda/hopper/tma_host.hpp"
#endif
#include "flashbox/flashbox.h"

namespace flashbox::test {
namespace {

// The sm90 backward's early dQ convert (fixed length up to head_dim 128): a completion counter per
// (batch, query head, query block) without the deterministic mode (whose semaphores it polls
// instead), and convert's work counter.
int64_t early_convert_bytes(int64_t query_blocks, bool det) {
  return (det ? 0 : query_blocks * 4) + 4;
}

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
  // grad(0) as a variable-length batch of one 64-token sequence (the buffers hold 64 rows a batch entry).
  detail::GradProblem varlen_grad() const {
    static int32_t cu[2] = {0, 64};
    detail::GradProblem g = grad(0);
    g.fwd.cu_seqlens_q = g.fwd.cu_seqlens_k = cu, g.fwd.max_seqlen_q = g.fwd.max_seqlen_k = 64;
    return g;
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

// The sm80 backward's query rows per step (tile_policy.hpp): 32 at head_dim 64, 64 elsewhere; the
// tuning override sm80_bwd_block_q = 64 times the other at head_dim 64.
TEST(HeadDimPlan, Sm80BackwardBlockQ) {
  const PlanCase c(64);
  detail::Problem p = detail::make_problem(c.a);
  EXPECT_EQ(sm80::bwd_block_q(p, 64), 32);
  EXPECT_EQ(sm80::bwd_block_q(p, 128), 64);
  EXPECT_EQ(sm80::bwd_block_q(p, 256), 64);
  p.tuning.overrides.sm80_bwd_block_q = 64;
  EXPECT_EQ(sm80::bwd_block_q(p, 64), 64);
}

#ifdef FLASHBOX_HAVE_SM90
// The sm90 forward serves every multiple of 8 up to 256 on the next instantiation up (64, 96, 128, 192, 256;
// the TMA zero-fills the columns past head_dim): the policy's choices for such a head_dim, decided
// without a device (the plan's last step asks for one, so its accepted plans are the GPU tests').
TEST(HeadDimPlan, Sm90ForwardServesMultiplesOf8OnTheNextInstantiation) {
  for (int64_t d : {8, 16, 32, 40, 56, 64}) EXPECT_EQ(sm90::kernel_head_dim(d), 64) << "d" << d;
  for (int64_t d : {72, 80, 88, 96}) EXPECT_EQ(sm90::kernel_head_dim(d), 96) << "d" << d;
  for (int64_t d : {104, 112, 120, 128}) EXPECT_EQ(sm90::kernel_head_dim(d), 128) << "d" << d;
  for (int64_t d : {136, 144, 160, 176, 184, 192}) EXPECT_EQ(sm90::kernel_head_dim(d), 192) << "d" << d;
  for (int64_t d : {200, 224, 248, 256}) EXPECT_EQ(sm90::kernel_head_dim(d), 256) << "d" << d;
  for (int64_t d : {0, 4, 59, 100, 111, 255, 264}) EXPECT_EQ(sm90::kernel_head_dim(d), 0) << "d" << d;
  struct Want {
    int64_t d;
    sm90::TileChoice tile;
    bool qreg, mods;
  };
  for (const Want w : {Want{8, {192, 128}, false, true}, Want{40, {192, 128}, false, true},
                       Want{72, {128, 128}, true, false}, Want{96, {128, 128}, true, false},
                       Want{104, {128, 128}, true, true}, Want{120, {128, 128}, true, true},
                       Want{136, {128, 112}, false, false}, Want{192, {128, 112}, false, false},
                       Want{200, {128, 64}, false, false}, Want{256, {128, 64}, false, false}}) {
    const PlanCase c(w.d);
    const detail::Problem p = detail::make_problem(c.a);
    sm90::TileChoice t{};
    ASSERT_TRUE(sm90::choose_tile(p, t)) << "d" << w.d;
    EXPECT_EQ(t.bm, w.tile.bm) << "d" << w.d;
    EXPECT_EQ(t.bn, w.tile.bn) << "d" << w.d;
    EXPECT_EQ(sm90::q_in_registers(sm90::kernel_head_dim(w.d), t.bn), w.qreg) << "d" << w.d;
    EXPECT_EQ(sm90::serving_head_dim(p), sm90::kernel_head_dim(w.d)) << "d" << w.d;
    EXPECT_EQ(sm90::has_score_mods(p, t), w.mods) << "d" << w.d;
    EXPECT_EQ(sm90::instantiation(sm90::kernel_head_dim(w.d), t), sm90::kernel_head_dim(w.d)) << "d" << w.d;
  }
  {  // 136..192 with the tile 128 x 64: the head_dim 256 kernel (the path before the 192 kernel)
    const PlanCase c(160);
    detail::Problem p = detail::make_problem(c.a);
    p.tuning.overrides.sm90_tile_m = 128, p.tuning.overrides.sm90_tile_n = 64;
    sm90::TileChoice t{};
    ASSERT_TRUE(sm90::choose_tile(p, t));
    EXPECT_EQ(sm90::instantiation(sm90::kernel_head_dim(160), t), 256);
    p.tuning.overrides.sm90_tile_n = 128;  // no such tile at 192
    EXPECT_FALSE(sm90::choose_tile(p, t));
  }
  {  // 72..96 with the tile 128 x 176: the head_dim 128 kernel (the path before the 96 kernel)
    const PlanCase c(96);
    detail::Problem p = detail::make_problem(c.a);
    p.tuning.overrides.sm90_tile_m = 128, p.tuning.overrides.sm90_tile_n = 176;
    sm90::TileChoice t{};
    EXPECT_TRUE(sm90::choose_tile(p, t));
    EXPECT_EQ(sm90::instantiation(sm90::kernel_head_dim(96), t), 128);
    EXPECT_FALSE(sm90::q_in_registers(sm90::kernel_head_dim(96), t.bn));
    EXPECT_FALSE(sm90::has_score_mods(p, t));
  }
  for (int64_t d : {72, 96}) {  // softcap or ALiBi at 72..96: the 128 kernel's MODS tile (the 96 kernel has none)
    const PlanCase c(d);
    detail::Problem p = detail::make_problem(c.a);
    p.mods.softcap = 30.f;
    EXPECT_EQ(sm90::serving_head_dim(p), 128) << "d" << d;
    sm90::TileChoice t{};
    ASSERT_TRUE(sm90::choose_tile(p, t));
    EXPECT_EQ(t.bm, 128);
    EXPECT_EQ(t.bn, 128);
    EXPECT_TRUE(sm90::has_score_mods(p, t)) << "d" << d;
    EXPECT_EQ(sm90::instantiation(sm90::serving_head_dim(p), t), 128);
  }
}

// The persistent grid's size (tile_policy.hpp, persistent_ctas): one CTA per SM less options.sm_margin,
// never more than the tiles; a tuning cap replaces the SM count; no SM count read: one CTA per tile.
// The schedule: a tuning override decides where set (a CTA cap implies persistent).
TEST(HeadDimPlan, Sm90PersistentGridAndSchedule) {
  const PlanCase c(128);
  detail::Problem p = detail::make_problem(c.a);
  EXPECT_EQ(sm90::persistent_ctas(p, 132, 1000), 132);
  EXPECT_EQ(sm90::persistent_ctas(p, 132, 100), 100);
  EXPECT_EQ(sm90::persistent_ctas(p, 0, 77), 77);
  p.tuning.sm_margin = 32;
  EXPECT_EQ(sm90::persistent_ctas(p, 132, 1000), 100);
  EXPECT_EQ(sm90::persistent_ctas(p, 132, 50), 50);
  p.tuning.overrides.sm90_max_ctas = 3;
  EXPECT_EQ(sm90::persistent_ctas(p, 132, 1000), 3);
  EXPECT_TRUE(sm90::persistent_schedule(p));
  p.tuning.overrides.sm90_schedule = detail::Sm90Schedule::grid;
  EXPECT_TRUE(sm90::persistent_schedule(p)) << "a CTA cap implies persistent";
  p.tuning.overrides.sm90_max_ctas = 0;
  EXPECT_FALSE(sm90::persistent_schedule(p));
  p.tuning.overrides.sm90_schedule = detail::Sm90Schedule::persistent;
  EXPECT_TRUE(sm90::persistent_schedule(p));
}

// The fp8 forward takes the same schedule rule in its one-byte K/V: causal calls run persistent up to
// 4 MB of K/V per head, which e4m3 reaches at twice bf16's length (D128: T = 16384; D256: 8192).
TEST(HeadDimPlan, Sm90PersistentScheduleCountsFp8Bytes) {
  const PlanCase c(128);
  detail::Problem p = detail::make_problem(c.a);
  p.mods = core::causal_mods(true);
  p.seqlen_q = p.seqlen_k = 16384;
  EXPECT_FALSE(sm90::persistent_schedule(p)) << "bf16 D128 T16384: 8 MB of K/V per head";
  p.dtype = FLASHBOX_FLOAT8_E4M3;
  EXPECT_TRUE(sm90::persistent_schedule(p)) << "e4m3 D128 T16384: 4 MB";
  p.head_dim = p.head_dim_v = 256;
  EXPECT_FALSE(sm90::persistent_schedule(p)) << "e4m3 D256 T16384: 8 MB";
  p.seqlen_q = p.seqlen_k = 8192;
  EXPECT_TRUE(sm90::persistent_schedule(p)) << "e4m3 D256 T8192: 4 MB";
  p.mods = core::causal_mods(false);
  p.seqlen_q = p.seqlen_k = 16384;
  EXPECT_TRUE(sm90::persistent_schedule(p)) << "not causal: always persistent";
}

// What the sm90 forward declines by head_dim, with the reason, before it asks for a device: a decline
// (code 0), not an error, so auto goes on to sm80.
TEST(HeadDimPlan, Sm90ForwardDeclinesAbove128WhatItHasNot) {
  const auto expect_decline = [](const detail::Problem &p, const std::string &why) {
    const detail::PlanResult r = detail::plan_sm90_forward(p);
    EXPECT_FALSE(r.plan.has_value()) << "d" << p.head_dim;
    EXPECT_EQ(r.code, 0) << "a decline, not an error: auto goes on to sm80";
    EXPECT_NE(r.why_not.find(why), std::string::npos) << r.why_not;
  };
  {
    const PlanCase c(100);  // the API refuses it first; the plan says why too
    expect_decline(detail::make_problem(c.a), "multiples of 8 up to 256 (got 100)");
  }
  static int32_t cu[2] = {0, 64};
  for (int64_t d : {136, 192, 256}) {
    const PlanCase c(d);
    detail::Problem p = detail::make_problem(c.a);
    p.cu_seqlens_q = p.cu_seqlens_k = cu, p.max_seqlen_q = p.max_seqlen_k = 64;
    expect_decline(p, "no variable-length batches for head_dim above 128 (got " + std::to_string(d) + ")");
    core::ScoreMods m = core::causal_mods(false);
    m.softcap = 30.0f;
    expect_decline(detail::make_problem(c.a, m), "no softcap or ALiBi for head_dim above 128 (got " + std::to_string(d));
  }
}

// The sm90 backward: 64 and 128 exactly, the d192 kernel for the multiples of 8 in 136..192 and the
// d256 kernel for those in 200..256 (on a Hopper device; elsewhere the plan declines for the device),
// never deterministic above 128 (the sm80 family takes it), and declines the head dims between
// (104..120, and those below 64: sm80's; 72..96 are the d96 kernel's).
TEST(HeadDimPlan, Sm90BackwardServesAbove128WithTheD192AndD256Kernels) {
  const bool hopper = sm90::sm90_unavailable_reason() == nullptr;
  for (int64_t d : {136, 160, 176, 192, 200, 224, 248, 256}) {
    const PlanCase c(d);
    const detail::PlanResult r = detail::plan_sm90_backward(c.grad(0), /*size_only=*/true);
    EXPECT_EQ(r.code, 0) << "d" << d;
    const int64_t kd = d <= 192 ? 192 : 256;
    if (hopper) {
      ASSERT_TRUE(r.plan.has_value()) << "d" << d << ": " << r.why_not;
      EXPECT_EQ(r.plan->kernel, "cuda_flash_bwd_sm90_d" + std::to_string(kd)) << "d" << d;
      // Scratch: LSE and D (4 B a padded row each) and the kd-column fp32 dQ accumulator.
      const int64_t rows = c.a.batch * c.a.heads_q * 64;
      EXPECT_EQ(r.plan->workspace_bytes, rows * 8 + rows * kd * 4) << "d" << d;
    } else {
      EXPECT_FALSE(r.plan.has_value()) << "d" << d;
    }
    const detail::PlanResult det = detail::plan_sm90_backward(c.grad(1), /*size_only=*/true);
    EXPECT_FALSE(det.plan.has_value()) << "d" << d;
    EXPECT_EQ(det.code, 0) << "a decline: auto goes on to sm80";
    EXPECT_NE(det.why_not.find("no deterministic mode for head_dim above 128"), std::string::npos) << det.why_not;
    // Variable-length batches stay at head_dim <= 128 (d64, d96, d128): a decline above, for sm80.
    const detail::PlanResult vr = detail::plan_sm90_backward(c.varlen_grad(), /*size_only=*/true);
    EXPECT_FALSE(vr.plan.has_value()) << "d" << d;
    EXPECT_EQ(vr.code, 0) << "a decline: auto goes on to sm80";
    EXPECT_NE(vr.why_not.find("variable-length batches only up to head_dim 128"), std::string::npos) << vr.why_not;
  }
  for (int64_t d : {100, 264}) {  // no multiple of 8 up to 256: declined for sm80 (whose plan says no too)
    const PlanCase c(d);
    const detail::PlanResult r = detail::plan_sm90_backward(c.grad(0), /*size_only=*/true);
    EXPECT_FALSE(r.plan.has_value()) << "d" << d;
    EXPECT_EQ(r.code, 0) << "d" << d;
    EXPECT_NE(r.why_not.find("multiples of 8 in 8..256 (got head_dim " + std::to_string(d) + ")"), std::string::npos)
        << r.why_not;
  }
}

// The sm90 backward below 64 and at 104..120 (branch paddims): the d64 and d128 kernels with zeros past
// head_dim, both dQ modes (deterministic: v10's order, "_qdesc", for bf16 at d128 and at d64 with
// GQA, here group 2: det_walk.hpp; else bf16 d128 the DQLAG schedule, "_dqlag"), the dQ accumulator
// of the instantiation's width, and varlen.
// PlanCase is bf16 with GQA 4/2: the deterministic runs at 8..32 stay on d64 in v10's order
// (bwd_route.hpp, plan_kernel_d), the atomic ones run d32 there; the d32 accumulator is 64 floats wide.
TEST(HeadDimPlan, Sm90BackwardServesBelow64And104To120WithTheD32D64AndD128Kernels) {
  const bool hopper = sm90::sm90_unavailable_reason() == nullptr;
  for (int64_t d : {8, 16, 24, 32, 40, 48, 56, 104, 112, 120}) {
    const PlanCase c(d);
    for (int det : {0, 1}) {
      const int64_t kd = d <= 32 && !det ? 32 : d <= 64 ? 64 : 128, bm = kd <= 64 ? 128 : 64;
      const int64_t accum_d = kd == 32 ? 64 : kd;
      const detail::PlanResult r = detail::plan_sm90_backward(c.grad(det), /*size_only=*/true);
      EXPECT_EQ(r.code, 0) << "d" << d;
      if (!hopper) {
        EXPECT_FALSE(r.plan.has_value()) << "d" << d;
        EXPECT_EQ(r.why_not.find("head_dim"), std::string::npos) << "declined for the device only: " << r.why_not;
        continue;
      }
      ASSERT_TRUE(r.plan.has_value()) << "d" << d << ": " << r.why_not;
      // bf16 d128 outside v10's order: the DQLAG schedule ("_dqlag", branch dqlag).
      const std::string want = "cuda_flash_bwd_sm90_d" + std::to_string(kd) +
                               (det         ? "_deterministic_qdesc"
                                : kd == 128 ? "_dqlag"
                                            : "");
      EXPECT_EQ(r.plan->kernel, want) << "d" << d;
      // LSE and D (4 B a padded row each), the kd-column fp32 dQ accumulator; deterministic: a
      // semaphore per (batch, query head, query block, consumer).
      const int64_t rows = c.a.batch * c.a.heads_q * bm, sems = det ? c.a.batch * c.a.heads_q * 2 * 4 : 0;
      EXPECT_EQ(r.plan->workspace_bytes,
                rows * 8 + rows * accum_d * 4 + sems + early_convert_bytes(c.a.batch * c.a.heads_q, det))
          << "d" << d;
    }
    if (hopper && d <= 32) {  // one query head per kv head: the d32 kernel in v9's order
      PlanCase m(d);
      m.a.heads_q = 2;  // 2 / 2 (the strides of 4 query heads stay valid)
      const detail::PlanResult r = detail::plan_sm90_backward(m.grad(1), /*size_only=*/true);
      ASSERT_TRUE(r.plan.has_value()) << "d" << d << ": " << r.why_not;
      EXPECT_EQ(r.plan->kernel, "cuda_flash_bwd_sm90_d32_deterministic") << "d" << d;
    }
    const int64_t kd = d <= 32 ? 32 : d <= 64 ? 64 : 128;
    const detail::PlanResult vr = detail::plan_sm90_backward(c.varlen_grad(), /*size_only=*/true);
    EXPECT_EQ(vr.code, 0) << "d" << d;
    if (hopper) {
      ASSERT_TRUE(vr.plan.has_value()) << "d" << d << ": " << vr.why_not;
      EXPECT_EQ(vr.plan->kernel,
                "cuda_flash_bwd_sm90_d" + std::to_string(kd) + (kd == 128 ? "_varlen_dqlag" : "_varlen"))
          << "d" << d;
    } else {
      EXPECT_FALSE(vr.plan.has_value()) << "d" << d;
    }
  }
}

// The sm90 backward at 72..96 (branch sm90-d96): the d96 kernel with zeros past head_dim, both dQ
// modes, its dQ accumulator 128 columns wide (the d128 layout); varlen too since branch paddims (the
// varlen dQ convert reads rows of the accumulator's width; before, it needed rows of head_dim floats).
TEST(HeadDimPlan, Sm90BackwardServes72To96WithTheD96Kernel) {
  const bool hopper = sm90::sm90_unavailable_reason() == nullptr;
  for (int64_t d : {72, 80, 96}) {
    const PlanCase c(d);
    for (int det : {0, 1}) {
      const detail::PlanResult r = detail::plan_sm90_backward(c.grad(det), /*size_only=*/true);
      EXPECT_EQ(r.code, 0) << "d" << d;
      if (hopper) {
        ASSERT_TRUE(r.plan.has_value()) << "d" << d << ": " << r.why_not;
        EXPECT_EQ(r.plan->kernel, det ? "cuda_flash_bwd_sm90_d96_deterministic" : "cuda_flash_bwd_sm90_d96") << "d" << d;
        if (!det) {  // LSE and D (4 B a padded row each) and the 128-column fp32 dQ accumulator
          const int64_t rows = c.a.batch * c.a.heads_q * 64;
          EXPECT_EQ(r.plan->workspace_bytes,
                    rows * 8 + rows * 128 * 4 + early_convert_bytes(c.a.batch * c.a.heads_q, false))
              << "d" << d;
        }
      } else {
        EXPECT_FALSE(r.plan.has_value()) << "d" << d;
      }
    }
    const detail::PlanResult vr = detail::plan_sm90_backward(c.varlen_grad(), /*size_only=*/true);
    EXPECT_EQ(vr.code, 0) << "d" << d;
    if (hopper) {
      ASSERT_TRUE(vr.plan.has_value()) << "d" << d << ": " << vr.why_not;
      EXPECT_EQ(vr.plan->kernel, "cuda_flash_bwd_sm90_d96_varlen") << "d" << d;
    } else {
      EXPECT_FALSE(vr.plan.has_value()) << "d" << d;
    }
  }
}
#endif

}  // namespace
}  // namespace flashbox::test
