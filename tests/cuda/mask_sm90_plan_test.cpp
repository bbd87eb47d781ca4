// Which mask-family calls the sm90 forward's plan takes (MaskExtConfig kernels: bf16, head dims up
// to 128, fixed length and varlen, 128-multiple mask blocks, mask mods on their block masks, no
// softcap or ALiBi, the tile 128x128) and the
// reason it gives for the others, decided by the planner alone (no device work: these run without a
// GPU; on a Hopper device the accepted plans are also checked for their kernel name and the doc
// spans' scratch). A decline has code 0, so auto goes on to the sm80 family. Suite MaskSm90Plan.
#include <cuda_runtime.h>
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
#include "cuda/forward/sm90/tile_policy.hpp"
#include "cuda/hopper/tma_host.hpp"
#endif

namespace flashbox::test {
namespace {

#ifdef FLASHBOX_HAVE_SM90
// A validated-looking problem (dense [batch, seq, heads, head_dim]); the pointers are never read, but
// an accepted plan encodes TMA descriptors of q/k/v/o, which the driver takes for device memory only:
// with a device they point into one device allocation.
struct MaskPlanCase {
  MaskPlanCase(int64_t d, flashbox_dtype t = FLASHBOX_BFLOAT16, int64_t seq = 300) {
    a.device = FLASHBOX_CUDA, a.dtype = t, a.impl = FLASHBOX_AUTO;
    a.batch = 2, a.seqlen_q = a.seqlen_k = seq, a.heads_q = 4, a.heads_kv = 2, a.head_dim = d;
    buf.assign(size_t(a.batch * seq * a.heads_q * d), 0);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 || cudaMalloc(&dev, buf.size() * 2) != cudaSuccess) {
      cudaGetLastError();
      dev = nullptr;
    }
    void *data = dev ? dev : static_cast<void *>(buf.data());
    a.q = a.k = a.v = data, a.o = data;
    a.lse = lse.data();
    const int64_t qs[3] = {seq * a.heads_q * d, a.heads_q * d, d}, ks[3] = {seq * a.heads_kv * d, a.heads_kv * d, d};
    std::copy_n(qs, 3, a.q_stride), std::copy_n(qs, 3, a.o_stride);
    std::copy_n(ks, 3, a.k_stride), std::copy_n(ks, 3, a.v_stride);
  }
  // The problem with a mask mod's block mask (128 x 128 blocks) and bit tiles attached (never read
  // by the planner), as src/api/mask_mod_tiles.hpp leaves it.
  detail::Problem with_mod(core::ScoreMods m = core::causal_mods(false)) const {
    static const uint32_t bits[4] = {};
    static const int64_t tile_base[64] = {};
    detail::Problem p = detail::make_problem(a, m);
    p.block_mask.struct_size = int32_t(sizeof p.block_mask);
    p.block_mask.kv_num_blocks = p.block_mask.kv_indices = ids();
    p.block_mask.full_kv_num_blocks = p.block_mask.full_kv_indices = ids();
    p.block_mask.q_block_size = p.block_mask.kv_block_size = 128, p.block_mask.max_kv_blocks = 3;
    p.block_mask.max_q_blocks = 3, p.block_mask.batch = a.batch, p.block_mask.heads = a.heads_q;
    p.mod_bits = bits, p.mod_tile_base = tile_base, p.mod_batch = a.batch, p.mod_heads = a.heads_q;
    return p;
  }
  // The problem with document ids (never read by the planner).
  detail::Problem with_documents(core::ScoreMods m = core::causal_mods(true)) const {
    m.doc_q = m.doc_k = ids(), m.doc_q_stride = m.doc_k_stride = a.seqlen_q;
    return detail::make_problem(a, m);
  }
  ~MaskPlanCase() { cudaFree(dev); }
  MaskPlanCase(const MaskPlanCase &) = delete;
  MaskPlanCase &operator=(const MaskPlanCase &) = delete;
  flashbox_attention_args a{};
  std::vector<uint16_t> buf;
  void *dev = nullptr;
  std::vector<float> lse = std::vector<float>(4096);
  const int32_t *ids() const { return reinterpret_cast<const int32_t *>(buf.data()); }
};

void expect_decline(const detail::Problem &p, const std::string &why) {
  const detail::PlanResult r = detail::plan_sm90_forward(p);
  EXPECT_FALSE(r.plan.has_value());
  EXPECT_EQ(r.code, 0) << "a decline, not an error: auto goes on to sm80";
  EXPECT_NE(r.why_not.find(why), std::string::npos) << r.why_not;
}

TEST(MaskSm90Plan, KernelHeadDims) {
  for (int64_t d : {8, 32, 64}) EXPECT_EQ(sm90::mask_kernel_head_dim(d), 64) << d;
  for (int64_t d : {72, 96, 104, 128}) EXPECT_EQ(sm90::mask_kernel_head_dim(d), 128) << d;
  for (int64_t d : {0, 60, 136, 192, 256}) EXPECT_EQ(sm90::mask_kernel_head_dim(d), 0) << d;
}

// The plan of `p` (head_dim d) runs the d64 or d128 `_masks` kernel with `workspace` bytes of scratch;
// without a Hopper device the mask checks passed and the device check is the one that declines.
void expect_masks_plan(const detail::Problem &p, int64_t d, int64_t workspace) {
  const detail::PlanResult r = detail::plan_sm90_forward(p);
  if (sm90::sm90_unavailable_reason() != nullptr) {
    EXPECT_FALSE(r.plan.has_value());
    EXPECT_EQ(r.why_not, sm90::sm90_unavailable_reason()) << "d" << d;
    return;
  }
  ASSERT_TRUE(r.plan.has_value()) << "d" << d << ": " << r.why_not;
  const std::string want = std::string("cuda_flash_sm90_d") + (d <= 64 ? "64" : "128") + "_128x128_masks";
  EXPECT_EQ(r.plan->kernel.rfind(want, 0), 0u) << r.plan->kernel;
  EXPECT_EQ(r.plan->workspace_bytes, workspace) << "d" << d;
}

TEST(MaskSm90Plan, TakesBf16UpTo128) {
  const bool hopper = sm90::sm90_unavailable_reason() == nullptr;
  for (int64_t d : {64, 80, 128}) {
    const MaskPlanCase c(d);
    // The doc spans: one int2 per (batch entry, 128-row query block).
    expect_masks_plan(c.with_documents(), d, 8 * c.a.batch * ((c.a.seqlen_q + 127) / 128));
  }
  // Varlen: the tile list, then a row of doc spans per sequence (as many blocks as the longest has).
  const MaskPlanCase c(64);
  detail::Problem p = c.with_documents();
  static int32_t cu[3] = {0, 100, 600};
  p.cu_seqlens_q = p.cu_seqlens_k = cu, p.max_seqlen_q = p.max_seqlen_k = 500;
  p.batch = 2, p.seqlen_q = p.seqlen_k = 600;
  const detail::PlanResult r = detail::plan_sm90_forward(p);
  if (!hopper) {
    EXPECT_EQ(r.why_not, sm90::sm90_unavailable_reason());
    return;
  }
  ASSERT_TRUE(r.plan.has_value()) << r.why_not;
  EXPECT_NE(r.plan->kernel.find("_masks"), std::string::npos) << r.plan->kernel;
  EXPECT_NE(r.plan->kernel.find("_varlen"), std::string::npos) << r.plan->kernel;
  const int64_t list = 16 + 8 * (600 / 128 + 2) * c.a.heads_q;
  EXPECT_EQ(r.plan->workspace_bytes, list + 8 * 2 * ((500 + 127) / 128));
}

// A mask mod runs on the mask-family kernels (its bit tiles read at run time: no kernel of its own,
// no scratch beyond the mod's), and the calls they do not take are declined with their reasons.
TEST(MaskSm90Plan, TakesMaskMods) {
  for (int64_t d : {64, 128}) {
    const MaskPlanCase c(d);
    expect_masks_plan(c.with_mod(), d, 0);
  }
  {
    const MaskPlanCase c(128, FLASHBOX_FLOAT16);
    expect_decline(c.with_mod(), "in bf16 only");
  }
  {
    const MaskPlanCase c(256);
    expect_decline(c.with_mod(), "at head dims up to 128");
  }
  {
    const MaskPlanCase c(128);
    core::ScoreMods m = core::causal_mods(false);
    m.alibi_slopes = reinterpret_cast<const float *>(c.ids());
    expect_decline(c.with_mod(m), "no softcap or ALiBi");
    detail::Problem p = c.with_mod();
    p.block_mask.q_block_size = 64;
    expect_decline(p, "multiples of 128 (got 64 x 128)");
  }
}

TEST(MaskSm90Plan, DeclinesWhatItsKernelsDoNotTake) {
  {
    const MaskPlanCase c(64, FLASHBOX_FLOAT16);
    expect_decline(c.with_documents(), "in bf16 only");
  }
  for (int64_t d : {136, 192, 256}) {
    const MaskPlanCase c(d);
    expect_decline(c.with_documents(), "at head dims up to 128");
  }
  {
    const MaskPlanCase c(64);
    detail::Problem p = detail::make_problem(c.a);
    static int32_t cu[2] = {0, 300};
    p.cu_seqlens_q = p.cu_seqlens_k = cu, p.max_seqlen_q = p.max_seqlen_k = 300;
    p.batch = 1;
    p.block_mask.kv_num_blocks = c.ids(), p.block_mask.kv_indices = c.ids();
    p.block_mask.q_block_size = p.block_mask.kv_block_size = 128, p.block_mask.max_kv_blocks = 3;
    p.block_mask.batch = p.block_mask.heads = 1;
    expect_decline(p, "block masks on fixed-length batches only");
  }
  {
    const MaskPlanCase c(128);
    core::ScoreMods m = core::causal_mods(false);
    m.softcap = 30.0f;
    expect_decline(c.with_documents(m), "no softcap or ALiBi");
  }
  {
    const MaskPlanCase c(128);
    detail::Problem p = c.with_documents();
    p.tuning.overrides.sm90_tile_m = 128, p.tuning.overrides.sm90_tile_n = 176;
    expect_decline(p, "on the tile 128x128 only");
  }
  {
    const MaskPlanCase c(64);
    detail::Problem p = detail::make_problem(c.a);
    p.block_mask.kv_num_blocks = c.ids(), p.block_mask.kv_indices = c.ids();
    p.block_mask.q_block_size = 64, p.block_mask.kv_block_size = 128, p.block_mask.max_kv_blocks = 3;
    p.block_mask.batch = p.block_mask.heads = 1;
    expect_decline(p, "multiples of 128 (got 64 x 128)");
  }
}
#endif

}  // namespace
}  // namespace flashbox::test
