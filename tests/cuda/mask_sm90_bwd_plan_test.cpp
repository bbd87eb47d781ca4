// Which mask-family calls the sm90 backward's plan takes (the kBwdD128MasksDqLag instantiation:
// document ids, prefix-LM lengths and block masks (from the q_* transposes or from kv_* alone), mask
// mods (routed as the block mask they come with; the scratch adds a tile pointer per step slot and the
// entries plane), with or without causal or a window, bf16, head dims 72..128 with head_dim_v =
// head_dim, fixed length, not deterministic, no softcap or ALiBi) and the reason it gives for the
// others (attention_chunk, seqused, varlen, fp16, other head dims, transforms, deterministic mode,
// block sizes that are not multiples of 128, GQA groups above 128 with a block mask or a mod, the
// same reasons for a mod), decided by the route
// (bwd_route.hpp, mask_route_decline) and
// the planner's size-only pass (no device work: these run without a GPU; on a Hopper device the
// accepted plans are also checked for their kernel name and the walk tables' scratch). A decline has
// code 0, so auto goes on to the sm80 family. Suite MaskSm90BwdPlan.
#include <gtest/gtest.h>

#include <algorithm>
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

TEST(MaskSm90BwdPlan, RouteTakesBlockMasks) {
  for (const bool docs : {false, true})
    for (const bool prefix : {false, true}) {
      MaskRouteCall c;
      c.block_mask = true, c.documents = docs, c.prefix = prefix;
      for (const int64_t group : {1, 4, 128})
        for (const int64_t qb : {128, 256})
          for (const int64_t kb : {128, 384}) {
            c.group = group, c.q_block = qb, c.kv_block = kb;
            EXPECT_EQ(mask_route_decline(c), nullptr) << group << " " << qb << " " << kb;
          }
    }
}

// The reasons a block-mask call is declined for (with `mod` a mask-mod call, routed as its block mask
// even where block_mask is not said; else documents with a block mask): block sizes, GQA groups,
// deterministic mode, varlen, and the rules every mask family has.
void expect_block_mask_reasons(bool mod) {
  const auto why = [mod](MaskRouteCall c) {
    c.mask_mod = mod, c.block_mask = !mod, c.documents = !mod;
    const char *r = mask_route_decline(c);
    return std::string(r ? r : "");
  };
  SCOPED_TRACE(mod ? "mask mod" : "documents and a block mask");
  MaskRouteCall c;
  c.q_block = 64;
  EXPECT_NE(why(c).find("multiples of 128"), std::string::npos);
  c = {}, c.kv_block = 192;
  EXPECT_NE(why(c).find("multiples of 128"), std::string::npos);
  c = {}, c.group = 129;
  EXPECT_NE(why(c).find("GQA groups up to 128"), std::string::npos);
  c = {}, c.deterministic = true;
  EXPECT_NE(why(c).find("deterministic"), std::string::npos);
  c = {}, c.varlen = true;
  EXPECT_NE(why(c).find("fixed-length batches only"), std::string::npos);
  c = {}, c.bf16 = false;
  EXPECT_NE(why(c).find("bf16 only"), std::string::npos);
  c = {}, c.head_dim = c.head_dim_v = 64;
  EXPECT_NE(why(c).find("head dims 72..128"), std::string::npos);
  c = {}, c.transforms = true;
  EXPECT_NE(why(c).find("softcap or ALiBi"), std::string::npos);
  c = {}, c.seqused = true;
  EXPECT_NE(why(c).find("seqused"), std::string::npos);
  c = {}, c.chunk = true;
  EXPECT_NE(why(c).find("attention_chunk"), std::string::npos);
}

// A mask mod runs on the mask-family kernel as the block mask it comes with (with or without
// documents, prefix or causal beside it), and a mod call that breaks a block-mask rule or any other
// rule is declined with that rule's reason.
TEST(MaskSm90BwdPlan, RouteTakesMaskMods) {
  MaskRouteCall c;
  c.mask_mod = c.block_mask = true;
  for (const int64_t group : {1, 8, 128})
    for (const int64_t qb : {128, 256})
      for (const int64_t d : {72, 128}) {
        c.group = group, c.q_block = qb, c.head_dim = c.head_dim_v = d;
        EXPECT_EQ(mask_route_decline(c), nullptr) << group << " " << qb << " " << d;
      }
  c = {}, c.mask_mod = true, c.documents = c.prefix = true;  // a mod beside the other families
  EXPECT_EQ(mask_route_decline(c), nullptr);
  expect_block_mask_reasons(true);
}

TEST(MaskSm90BwdPlan, RouteDeclinesWithAReason) {
  expect_block_mask_reasons(false);
  const auto why = [](MaskRouteCall c) {
    c.documents = true;
    const char *r = mask_route_decline(c);
    return std::string(r ? r : "");
  };
  MaskRouteCall c;
  c.group = 129;  // without a block mask the group does not matter
  EXPECT_EQ(why(c), "");
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
  // The problem of mods m, with the args' causal flag saying what m says (the kernel's name tells a
  // causal call from a window by it, as the API's calls set both).
  detail::Problem problem(const core::ScoreMods &m) const {
    flashbox_attention_args x = a;
    x.causal = m.window_left < 0 && m.window_right == 0;
    return detail::make_problem(x, m);
  }
  // Document ids (and with prefix, prefix lengths), never read by the planner.
  detail::GradProblem with_masks(bool docs, bool prefix, core::ScoreMods m = core::causal_mods(true)) const {
    if (docs) m.doc_q = m.doc_k = ids(), m.doc_q_stride = m.doc_k_stride = a.seqlen_q;
    if (prefix) m.prefix = ids();
    return grad(problem(m));
  }
  // A block mask of 128 x 128 blocks (broadcast batch, per query head), the tables never read by the
  // planner: kv_* (max_kv_blocks 3), with `full` full_kv_* too, with `transposes` q_* (max_q_blocks
  // 5, more than the 3 query blocks of 300 rows) and with `full` full_q_*.
  detail::GradProblem with_blocks(bool transposes, bool full) const {
    detail::GradProblem g = grad(problem(core::causal_mods(true)));
    flashbox_block_mask &m = g.fwd.block_mask;
    m.struct_size = int32_t(sizeof m);
    m.batch = 1, m.heads = a.heads_q, m.q_block_size = m.kv_block_size = 128;
    m.max_kv_blocks = 3, m.max_q_blocks = transposes ? 5 : 0;
    m.kv_num_blocks = m.kv_indices = ids();
    if (full) m.full_kv_num_blocks = m.full_kv_indices = ids();
    if (transposes) m.q_num_blocks = m.q_indices = ids();
    if (transposes && full) m.full_q_num_blocks = m.full_q_indices = ids();
    return g;
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

// Block masks: the plan takes them with and without the q_* transposes (the step lists from q_*, or
// from the marks built from kv_*), full blocks or not; the scratch holds the step lists after the
// mask walks' table: a count per CTA (rounded up to 16 bytes), group x kinds x min(max_q_blocks,
// num_q_blocks) x (q_block_size / 64) steps per CTA, and without q_* a byte plane per kind of (mask
// batch, mask head, key block, query block) marks. With a mask mod (`mod`: its bit tiles attached,
// mod_bits set, never read by the planner) the same kernels, the scratch adding a tile pointer per
// step slot and the entries plane (an int per (mask batch, mask head, key block, query block)), with
// q_* too.
void check_block_plans(bool mod) {
  static const uint32_t bits[4] = {};
  static const int64_t tile_base[64] = {};
  const bool hopper = sm90::sm90_unavailable_reason() == nullptr;
  for (const bool transposes : {true, false})
    for (const bool full : {false, true}) {
      const BwdPlanCase c(128);
      detail::GradProblem g = c.with_blocks(transposes, full);
      if (mod) g.fwd.mod_bits = bits, g.fwd.mod_tile_base = tile_base, g.fwd.mod_heads = c.a.heads_q;
      const detail::PlanResult r = detail::plan_sm90_backward(g, true);
      SCOPED_TRACE(std::string(transposes ? "q_*" : "kv_* only") + (full ? ", full blocks" : "") +
                   (mod ? ", mask mod" : ""));
      if (!hopper) {
        EXPECT_FALSE(r.plan.has_value());
        EXPECT_EQ(r.why_not, sm90::sm90_unavailable_reason());
        continue;
      }
      ASSERT_TRUE(r.plan.has_value()) << r.why_not;
      EXPECT_EQ(r.plan->kernel, transposes ? "cuda_flash_bwd_sm90_d128_masks_blocks_dqlag"
                                           : "cuda_flash_bwd_sm90_d128_masks_blocks_marks_dqlag");
      const auto round16 = [](int64_t x) { return (x + 15) / 16 * 16; };
      const int64_t m_blocks = (c.a.seqlen_q + 63) / 64, n_blocks = (c.a.seqlen_k + 127) / 128;
      const int64_t nqb = (c.a.seqlen_q + 127) / 128, nkvb = n_blocks, group = c.a.heads_q / c.a.heads_kv;
      const int64_t vec = c.a.batch * c.a.heads_q * m_blocks * 64 * 4;
      const int64_t walk = c.a.batch * n_blocks * 16;
      const int64_t ctas = c.a.batch * c.a.heads_kv * n_blocks, kinds = full ? 2 : 1;
      const int64_t slots = group * kinds * (transposes ? std::min<int64_t>(5, nqb) : nqb) * 2;
      const int64_t plane = 1 * c.a.heads_q * nkvb * nqb;
      const int64_t blocks = round16(ctas * 4) + round16(ctas * slots * 4) + (transposes ? 0 : kinds * round16(plane)) +
                             (mod ? round16(ctas * slots * 8) + round16(plane * 4) : 0);
      EXPECT_EQ(r.plan->workspace_bytes, 2 * vec + vec * 128 + walk + blocks);
    }
}

TEST(MaskSm90BwdPlan, PlanTakesBlockMasks) { check_block_plans(false); }

// A mask mod on a block mask (check_block_plans); the rules that decline a block mask decline the
// mod call with their reasons.
TEST(MaskSm90BwdPlan, PlanTakesMaskMods) {
  check_block_plans(true);
  const auto with_mod = [](detail::GradProblem g) {
    static const uint32_t bits[4] = {};
    g.fwd.mod_bits = bits;
    return g;
  };
  {
    const BwdPlanCase c(128, FLASHBOX_FLOAT16);
    expect_decline(with_mod(c.with_blocks(false, true)), "bf16 only");
  }
  {
    const BwdPlanCase c(64);
    expect_decline(with_mod(c.with_blocks(false, true)), "head dims 72..128");
  }
  {
    const BwdPlanCase c(128);
    detail::GradProblem g = with_mod(c.with_blocks(false, true));
    g.deterministic = 1;
    expect_decline(g, "no deterministic mode");
    g.deterministic = 0, g.fwd.block_mask.q_block_size = 64;
    expect_decline(g, "multiples of 128");
  }
  {
    const BwdPlanCase c(128);
    detail::GradProblem g = with_mod(c.with_blocks(false, true));
    g.fwd.mods.softcap = 30.0f;
    expect_decline(g, "no softcap or ALiBi");
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
    detail::GradProblem g = c.with_blocks(true, true);
    g.deterministic = 1;
    expect_decline(g, "no deterministic mode");
  }
  {
    const BwdPlanCase c(64);
    expect_decline(c.with_blocks(true, false), "head dims 72..128");
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
