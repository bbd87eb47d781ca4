// Which mask-family calls the sm90 backward's plan takes (the kBwdD128MasksDqLag instantiation:
// document ids and prefix-LM lengths, with or without causal or a window, bf16, head dims 72..128
// with head_dim_v = head_dim, fixed length, not deterministic, no softcap or ALiBi) and the reason it
// gives for the others (block masks, mask mods, attention_chunk, seqused, varlen, fp16, other head
// dims, transforms, deterministic mode), decided by the route (bwd_route.hpp, mask_route_decline) and
// the planner's size-only pass (no device work: these run without a GPU; on a Hopper device the
// accepted plans are also checked for their kernel name and the walk tables' scratch). A decline has
// code 0, so auto goes on to the sm80 family. Suite MaskSm90BwdPlan.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/backends.hpp"
#include "core/masks.hpp"
#include "core/problem.hpp"
#include "flashbox/flashbox.h"
#ifdef FLASHBOX_HAVE_SM90
#include "cuda/backward/sm90/bwd_route.hpp"
#include "cuda/hopper/tma_host.hpp"
#endif

namespace flashbox::test {
namespace {

#ifdef FLASHBOX_HAVE_SM90
using sm90::bwd::mask_route_decline;
using sm90::bwd::MaskRouteCall;

TEST(MaskSm90BwdPlan, RouteTakesDocumentsAndPrefix) {
  for (int64_t d = 8; d <= 256; d += 8) EXPECT_EQ(sm90::bwd::mask_kernel_takes(d), d >= 72 && d <= 128) << d;
  EXPECT_FALSE(sm90::bwd::mask_kernel_takes(100));
  for (const bool docs : {false, true})
    for (const bool prefix : {false, true}) {
      if (!docs && !prefix) continue;
      MaskRouteCall c;
      c.documents = docs, c.prefix = prefix;
      for (const int64_t d : {72, 80, 104, 128}) {
        c.head_dim = c.head_dim_v = d;
        EXPECT_EQ(mask_route_decline(c), nullptr) << d;
      }
    }
}

TEST(MaskSm90BwdPlan, RouteDeclinesWithAReason) {
  const auto why = [](MaskRouteCall c) {
    c.documents = true;
    const char *r = mask_route_decline(c);
    return std::string(r ? r : "");
  };
  MaskRouteCall c;
  c.block_mask = true;
  EXPECT_NE(why(c).find("no block masks"), std::string::npos);
  c = {}, c.mask_mod = true;
  EXPECT_NE(why(c).find("mask mods"), std::string::npos);
  c = {}, c.chunk = true;
  EXPECT_NE(why(c).find("attention_chunk"), std::string::npos);
  c = {}, c.seqused = true;
  EXPECT_NE(why(c).find("seqused"), std::string::npos);
  c = {}, c.varlen = true;
  EXPECT_NE(why(c).find("fixed-length batches only"), std::string::npos);
  c = {}, c.bf16 = false;
  EXPECT_NE(why(c).find("bf16 only"), std::string::npos);
  for (const int64_t d : {8, 64, 136, 256}) {
    c = {}, c.head_dim = c.head_dim_v = d;
    EXPECT_NE(why(c).find("head dims 72..128"), std::string::npos) << d;
  }
  c = {}, c.head_dim_v = 64;
  EXPECT_NE(why(c).find("head_dim_v = head_dim"), std::string::npos);
  c = {}, c.transforms = true;
  EXPECT_NE(why(c).find("softcap or ALiBi"), std::string::npos);
  c = {}, c.deterministic = true;
  EXPECT_NE(why(c).find("deterministic"), std::string::npos);
}

// A problem of dense [batch, seq, heads, head_dim] tensors and its gradient; the pointers are never
// read (the size-only plan encodes no TMA descriptors).
struct BwdPlanCase {
  BwdPlanCase(int64_t d, flashbox_dtype t = FLASHBOX_BFLOAT16, int64_t seq = 300) {
    a.device = FLASHBOX_CUDA, a.dtype = t, a.impl = FLASHBOX_AUTO;
    a.batch = 2, a.seqlen_q = a.seqlen_k = seq, a.heads_q = 4, a.heads_kv = 2, a.head_dim = d;
    buf.assign(size_t(a.batch * seq * a.heads_q * d), 0);
    void *data = buf.data();
    a.q = a.k = a.v = data, a.o = data;
    a.lse = lse.data();
    const int64_t qs[3] = {seq * a.heads_q * d, a.heads_q * d, d}, ks[3] = {seq * a.heads_kv * d, a.heads_kv * d, d};
    for (int i = 0; i < 3; ++i) a.q_stride[i] = a.o_stride[i] = qs[i], a.k_stride[i] = a.v_stride[i] = ks[i];
  }
  detail::GradProblem grad(const detail::Problem &p) const {
    detail::GradProblem g{};
    g.fwd = p;
    g.dout = buf.data(), g.dq = g.dk = g.dv = const_cast<uint16_t *>(buf.data());
    for (int i = 0; i < 3; ++i) {
      g.dout_stride[i] = g.dq_stride[i] = a.q_stride[i];
      g.dk_stride[i] = g.dv_stride[i] = a.k_stride[i];
    }
    return g;
  }
  // Document ids (and with prefix, prefix lengths), never read by the planner.
  detail::GradProblem with_masks(bool docs, bool prefix, core::ScoreMods m = core::causal_mods(true)) const {
    if (docs) m.doc_q = m.doc_k = ids(), m.doc_q_stride = m.doc_k_stride = a.seqlen_q;
    if (prefix) m.prefix = ids();
    return grad(detail::make_problem(a, m));
  }
  flashbox_attention_args a{};
  std::vector<uint16_t> buf;
  std::vector<float> lse = std::vector<float>(4096);
  const int32_t *ids() const { return reinterpret_cast<const int32_t *>(buf.data()); }
};

void expect_decline(const detail::GradProblem &g, const std::string &why) {
  const detail::PlanResult r = detail::plan_sm90_backward(g, true);
  EXPECT_FALSE(r.plan.has_value());
  EXPECT_EQ(r.code, 0) << "a decline, not an error: auto goes on to sm80";
  EXPECT_NE(r.why_not.find(why), std::string::npos) << r.why_not;
}

TEST(MaskSm90BwdPlan, PlanTakesBf16Documents72To128) {
  const bool hopper = sm90::sm90_unavailable_reason() == nullptr;
  for (const int64_t d : {80, 128})
    for (const bool docs : {false, true})
      for (const bool prefix : {false, true}) {
        if (!docs && !prefix) continue;
        const BwdPlanCase c(d);
        const detail::PlanResult r = detail::plan_sm90_backward(c.with_masks(docs, prefix), true);
        if (!hopper) {  // the mask checks passed; the device check is the one that declines
          EXPECT_FALSE(r.plan.has_value());
          EXPECT_EQ(r.why_not, sm90::sm90_unavailable_reason()) << "d" << d;
          continue;
        }
        ASSERT_TRUE(r.plan.has_value()) << "d" << d << ": " << r.why_not;
        EXPECT_EQ(r.plan->kernel, "cuda_flash_bwd_sm90_d128_masks_dqlag") << r.plan->kernel;
        // The walk tables after the vectors and the accumulator (no semaphores, no early convert's
        // counters): an int4 per (batch entry, 128-key block), with documents an int2 per (batch
        // entry, 64-row query block).
        const int64_t m_blocks = (c.a.seqlen_q + 63) / 64;
        const int64_t vec = c.a.batch * c.a.heads_q * m_blocks * 64 * 4;
        const int64_t walk = c.a.batch * ((c.a.seqlen_k + 127) / 128) * 16 + (docs ? c.a.batch * m_blocks * 8 : 0);
        EXPECT_EQ(r.plan->workspace_bytes, 2 * vec + vec * 128 + walk) << "d" << d;
      }
}

TEST(MaskSm90BwdPlan, PlanDeclinesWhatTheKernelDoesNotTake) {
  {
    const BwdPlanCase c(128, FLASHBOX_FLOAT16);
    expect_decline(c.with_masks(true, false), "bf16 only");
  }
  for (const int64_t d : {64, 136, 256}) {
    const BwdPlanCase c(d);
    expect_decline(c.with_masks(true, true), "head dims 72..128");
  }
  {
    const BwdPlanCase c(128);
    core::ScoreMods m = core::causal_mods(false);
    m.softcap = 30.0f;
    expect_decline(c.with_masks(true, false, m), "no softcap or ALiBi");
  }
  {
    const BwdPlanCase c(128);
    detail::GradProblem g = c.with_masks(false, true);
    g.deterministic = 1;
    expect_decline(g, "no deterministic mode");
  }
  {
    const BwdPlanCase c(128);
    detail::GradProblem g = c.grad(detail::make_problem(c.a));
    g.fwd.block_mask.kv_num_blocks = c.ids(), g.fwd.block_mask.kv_indices = c.ids();
    g.fwd.block_mask.q_block_size = g.fwd.block_mask.kv_block_size = 128, g.fwd.block_mask.max_kv_blocks = 3;
    g.fwd.block_mask.batch = g.fwd.block_mask.heads = 1;
    expect_decline(g, "no block masks");
  }
  {
    const BwdPlanCase c(128);
    core::ScoreMods m = core::causal_mods(true);
    m.chunk = 64;
    expect_decline(c.grad(detail::make_problem(c.a, m)), "attention_chunk");
  }
  {
    const BwdPlanCase c(128);
    detail::GradProblem g = c.with_masks(true, false);
    g.fwd.seqused_k = c.ids();
    expect_decline(g, "seqused");
  }
  {
    const BwdPlanCase c(128);
    detail::GradProblem g = c.with_masks(true, false);
    static int32_t cu[3] = {0, 100, 300};
    g.fwd.cu_seqlens_q = g.fwd.cu_seqlens_k = cu, g.fwd.max_seqlen_q = g.fwd.max_seqlen_k = 200;
    g.fwd.batch = 2;
    expect_decline(g, "fixed-length batches only");
  }
}
#endif

}  // namespace
}  // namespace flashbox::test
