// flashbox_attention_ext's mask families on the Hopper forward (MaskExtConfig kernels:
// src/cuda/forward/sm90/mask_walk.cuh): document ids (8 and 32 packed documents straddling the
// 128-row blocks, scattered ids, queries whose documents the keys lack), prefix-LM (with causal, a
// window, documents), attention_chunk, seqused_q/k (rows past the used ones untouched, no key at
// all), FlexAttention BlockMasks (random 50 % block-sparse with and without full blocks, broadcast
// heads, 256 x 128 and 128 x 256 blocks, documents inside partial blocks, everything skipped,
// malformed tables), at T = 1, 17, 63, 64, 65, 1000, 4097, seqlen_q != seqlen_k, GQA, causal and
// not, head dims 64, 128 and 80 (the 128 kernel), variable-length batches (documents, prefix, chunk,
// seqused; sequences of 1 to 700 tokens, one with no key), bf16 with outliers in q and k, against the fp64
// reference of support/mask_case.hpp (seed printed; FLASHBOX_TEST_SEED=N repeats one). Outputs are
// poisoned (NaN) and framed by guard bytes; NaN never passes. Every forward must run on an sm90
// `_masks` kernel; its O and LSE then feed the backward, whose gradients must match the reference
// too: the sm90 backward's mask kernel (cuda_flash_bwd_sm90_d128_masks: document ids, prefix-LM and
// block masks at bf16 head dims 72..128, fixed length; bwd_route.hpp, mask_route_decline) where its
// route takes the call, else the sm80 family (chunk, seqused, varlen, head_dim 64). Calls the
// forward kernels do not take (fp16, head_dim 256) must fall back to the sm80 family. Suites
// MaskSm90*: `ctest -R MaskSm90`.
// Skipped, with the reason, without a Hopper GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flashbox/flashbox.h"
#include "cuda/backward/sm90/bwd_route.hpp"
#include "sm90/hopper_device.hpp"
#include "support/mask_case.hpp"
#include "support/mask_device_call.hpp"

namespace flashbox::test::sm90_mask {
namespace {

using mask_gpu::DeviceCall;
using mask_gpu::document_ids;
using mask_gpu::random_blocks;
using mask_gpu::same_documents;

#define SKIP_WITHOUT_HOPPER() \
  do { \
    std::string why_; \
    if (!have_hopper(why_)) GTEST_SKIP() << "sm90 test not run: " << why_; \
  } while (0)

bool starts_with(const std::string &s, const char *p) { return s.rfind(p, 0) == 0; }

// Whether the sm90 backward's route takes the case's (non-deterministic) backward: the route's own
// decision, so that the test follows it (the plan test, tests/cuda/mask_sm90_bwd_plan_test.cpp,
// checks the decision itself).
bool sm90_backward_takes(const MaskCase &c) {
  sm90::bwd::MaskRouteCall r;
  r.documents = !c.docs_q.empty(), r.prefix = !c.prefix.empty();
  r.block_mask = c.blocks.on(), r.chunk = c.attention_chunk > 0, r.seqused = !c.used_q.empty() || !c.used_k.empty();
  r.varlen = c.varlen(), r.bf16 = c.dtype == FLASHBOX_BFLOAT16, r.transforms = c.softcap > 0 || c.alibi != 0;
  r.head_dim = r.head_dim_v = c.head_dim;
  r.group = c.heads_q / c.heads_kv, r.q_block = c.blocks.q_block, r.kv_block = c.blocks.kv_block;
  return sm90::bwd::mask_route_decline(r) == nullptr;
}

// The forward on the GPU against the fp64 reference (it must run an sm90 `_masks` kernel, or with
// want_sm80 the sm80 family), then the backward from this forward's O and LSE (all rows used: rows
// past seqused_q hold the forward's untouched poison, so those cases feed the reference's): the sm90
// mask backward where its route takes the call, else the sm80 family.
void check_gpu(const MaskCase &c, bool want_empty_rows = false, bool want_sm80 = false) {
  MaskData md(c);
  SCOPED_TRACE(md.name());
  if (want_empty_rows) {
    EXPECT_GT(md.empty_rows(), 0) << "the case should hold rows that see no key";
  }
  DeviceCall call(md);
  ASSERT_TRUE(call.ok()) << "device allocation or copy";
  std::string kernel;
  ASSERT_EQ(call.forward(&kernel), 0) << flashbox_last_error();
  if (want_sm80) {
    EXPECT_TRUE(starts_with(kernel, "cuda_flash_sm80_")) << kernel;
  } else {
    EXPECT_TRUE(starts_with(kernel, "cuda_flash_sm90_d") && kernel.find("_masks") != std::string::npos) << kernel;
  }
  const Error eo = md.o_error();
  EXPECT_FALSE(eo.nan) << "o has NaN or inf (" << kernel << ")";
  EXPECT_LT(eo.rel, md.tolerance()) << "o (" << kernel << ")";
  EXPECT_LT(md.lse_error(), 2e-2) << "lse (" << kernel << ")";
  EXPECT_TRUE(md.unused_outputs_untouched()) << "rows past seqused_q were written";
  const bool all_rows = c.used_q.empty();
  const std::vector<uint8_t> o = md.o_bytes();
  const std::vector<float> lse = md.lse();
  std::string bk;
  ASSERT_EQ(call.backward(0, &bk, all_rows ? &o : nullptr, all_rows ? &lse : nullptr), 0) << flashbox_last_error();
  if (sm90_backward_takes(c)) {
    EXPECT_TRUE(starts_with(bk, "cuda_flash_bwd_sm90_d128_masks")) << bk;
    if (c.blocks.on()) {  // the step lists from q_*, or without them from the marks built from kv_*
      EXPECT_NE(bk.find("_blocks"), std::string::npos) << bk;
      EXPECT_EQ(bk.find("_blocks_marks") != std::string::npos, !c.blocks.transposes) << bk;
    }
  } else {
    EXPECT_TRUE(starts_with(bk, "cuda_flash_bwd_sm80_")) << bk;
  }
  const std::pair<const char *, Error> grads[] = {{"dq", md.dq_error()}, {"dk", md.dk_error()}, {"dv", md.dv_error()}};
  for (const auto &[name, err] : grads) {
    EXPECT_FALSE(err.nan) << name << " has NaN or inf (" << bk << " after " << kernel << ")";
    EXPECT_LT(err.rel, md.tolerance()) << name << " (" << bk << " after " << kernel << ")";
  }
  std::printf("  %s: o %.2e, %s\n", md.name().c_str(), eo.rel, kernel.c_str());
}

MaskCase base(int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal = 0) {
  MaskCase c;
  if (sq > 1000 && hq > 2) hq = 2, hkv = 1;  // long sequences: fewer heads (the fp64 reference's cost), still GQA
  c.batch = batch, c.seqlen_q = sq, c.seqlen_k = sk, c.heads_q = hq, c.heads_kv = hkv, c.head_dim = d;
  c.dtype = FLASHBOX_BFLOAT16, c.causal = causal, c.input_outliers = true;
  return c;
}

const int64_t kLengths[] = {1, 17, 63, 64, 65, 1000, 4097};

TEST(MaskSm90Documents, PackedDocuments) {
  SKIP_WITHOUT_HOPPER();
  for (const int64_t t : kLengths)
    for (const int docs : {8, 32})
      for (const int causal : {0, 1}) {
        if (t == 4097 && (causal == 0 || docs == 8)) continue;  // the fp64 reference's cost
        MaskCase c = base(t > 1000 ? 1 : 2, t, t, 4, 2, (t + docs) % 2 ? 64 : 128, causal);
        std::mt19937_64 rng(c.seed);
        same_documents(c, rng, docs);
        check_gpu(c);
      }
}

TEST(MaskSm90Documents, UnequalLengthsScatteredIdsAndRowsThatSeeNoKey) {
  SKIP_WITHOUT_HOPPER();
  // Scattered ids (any order), and query documents the keys lack: those rows see nothing.
  MaskCase c = base(2, 300, 257, 4, 1, 64);
  std::mt19937_64 rng(c.seed);
  c.docs_q = document_ids(rng, c.batch, c.seqlen_q, 6, true);
  c.docs_k = document_ids(rng, c.batch, c.seqlen_k, 4, true);
  check_gpu(c, true);
  for (const auto &[sq, sk] : {std::pair<int64_t, int64_t>{200, 333}, {513, 130}, {65, 1000}}) {
    MaskCase s = base(2, sq, sk, 4, 2, 128, 1);
    std::mt19937_64 rng2(s.seed);
    same_documents(s, rng2, 8);
    check_gpu(s);
  }
  // The same rows that see no key at head_dim 128 (the sm90 mask backward: their dQ must be 0, and
  // LSE = -inf must not turn into NaN), scattered ids in 64-row query blocks and 128-key blocks.
  MaskCase n = base(2, 300, 257, 4, 1, 128);
  std::mt19937_64 rng4(n.seed);
  n.docs_q = document_ids(rng4, n.batch, n.seqlen_q, 6, true);
  n.docs_k = document_ids(rng4, n.batch, n.seqlen_k, 4, true);
  check_gpu(n, true);
  MaskCase h = base(2, 700, 700, 2, 2, 80, 1);  // head_dim 80 on the 128 kernel
  std::mt19937_64 rng3(h.seed);
  same_documents(h, rng3, 32);
  check_gpu(h);
}

TEST(MaskSm90PrefixLm, PrefixWithCausalWindowAndDocuments) {
  SKIP_WITHOUT_HOPPER();
  for (const int64_t t : {int64_t(1), int64_t(17), int64_t(64), int64_t(65), int64_t(1000)}) {
    MaskCase c = base(3, t, t, 4, 2, 64, 1);
    c.prefix = {int32_t(t / 3), 0, int32_t(t)};
    check_gpu(c);
    c.causal = 0, c.window_left = 50, c.window_right = 0, c.head_dim = 128;
    check_gpu(c);
  }
  MaskCase d = base(2, 700, 900, 2, 1, 64, 1);  // with documents, seqlen_q != seqlen_k
  d.prefix = {300, 5};
  std::mt19937_64 rng(d.seed);
  same_documents(d, rng, 8);
  check_gpu(d);
  d.head_dim = 112;  // the same at a head_dim the sm90 mask backward takes (72..128 on its d128 kernel)
  check_gpu(d);
  MaskCase l = base(1, 4097, 4097, 2, 1, 128, 1);
  l.prefix = {1500};
  check_gpu(l);
}

TEST(MaskSm90Chunk, ChunkedAttention) {
  SKIP_WITHOUT_HOPPER();
  for (const int64_t t : {int64_t(17), int64_t(63), int64_t(1000), int64_t(4097)})
    for (const int64_t chunk : {int64_t(16), int64_t(100), int64_t(512)}) {
      if (t == 4097 && chunk != 512) continue;  // the fp64 reference's cost
      MaskCase c = base(t > 1000 ? 1 : 2, t, t + (t > 100 ? 37 : 0), 4, 2, chunk == 100 ? 128 : 64, 1);
      c.attention_chunk = chunk;
      check_gpu(c);
    }
  MaskCase c = base(2, 300, 300, 2, 2, 128);  // without causal, with a window
  c.attention_chunk = 64, c.window_left = 20;
  check_gpu(c);
}

TEST(MaskSm90Seqused, UsedLengths) {
  SKIP_WITHOUT_HOPPER();
  MaskCase c = base(3, 300, 260, 4, 2, 64, 1);
  c.used_q = {300, 17, 0}, c.used_k = {1, 260, 100};
  check_gpu(c);
  MaskCase d = base(2, 1000, 1000, 2, 1, 128);
  d.used_q = {999, 130};
  std::mt19937_64 rng(d.seed);
  same_documents(d, rng, 8);
  check_gpu(d);
  MaskCase k = base(2, 129, 513, 2, 2, 128, 1);  // keys only: V rows past the used ones are zeroed
  k.used_k = {200, 0};
  check_gpu(k, true);
}

TEST(MaskSm90BlockSparse, RandomHalfSparse) {
  SKIP_WITHOUT_HOPPER();
  for (const int64_t t : kLengths)
    for (const double full : {0.0, 0.4}) {
      if (t == 4097 && full == 0.0) continue;  // the fp64 reference's cost
      MaskCase c = base(t > 1000 ? 1 : 2, t, t, 4, 2, t % 2 ? 64 : 128, t % 2);
      std::mt19937_64 rng(c.seed);
      c.blocks = random_blocks(rng, c, 128, 128, c.batch, c.heads_q, 0.5, full);
      c.blocks.transposes = full > 0;  // the sm90 backward's walk from q_*, or from the marks of kv_*
      check_gpu(c);
    }
}

// Skips every key block of query block qb of mask row x (its rows see no key).
void skip_query_block(BlockSpec &bs, const MaskCase &c, int64_t x, int64_t qb) {
  const int64_t nq = (c.seqlen_q + bs.q_block - 1) / bs.q_block, nk = (c.seqlen_k + bs.kv_block - 1) / bs.kv_block;
  for (int64_t kb = 0; kb < nk; ++kb) bs.kinds[size_t((x * nq + qb) * nk + kb)] = core::kBlockSkipped;
}

// The sm90 backward's block-mask walks (cuda_flash_bwd_sm90_d128_masks_blocks*): a list per query
// head of the GQA group (the heads' masks differ), partial and full blocks, from the q_* transposes
// and from the marks built from kv_*, T not a multiple of 128 and seqlen_q != seqlen_k, rows that see
// no key, broadcast batch and heads, 256-row and 256-key blocks, causal and a window in the partial
// blocks.
TEST(MaskSm90BlockSparse, BackwardWalksPerHead) {
  SKIP_WITHOUT_HOPPER();
  for (const bool transposes : {true, false}) {
    MaskCase c = base(1, 1000, 1000, 4, 1, 128);  // GQA 4/1, a mask per query head
    std::mt19937_64 rng(c.seed + transposes);
    c.blocks = random_blocks(rng, c, 128, 128, 1, 4, 0.5, 0.3);
    c.blocks.transposes = transposes;
    skip_query_block(c.blocks, c, 0, 2);  // head 0's rows 256..383 see no key
    check_gpu(c, true);
  }
  MaskCase u = base(2, 700, 1000, 4, 2, 112, 1);  // broadcast batch, per head; causal partials
  std::mt19937_64 rng(u.seed);
  u.blocks = random_blocks(rng, u, 128, 128, 1, 4, 0.4, 0.3);
  check_gpu(u);
  u.blocks.transposes = true;
  check_gpu(u);
  MaskCase w = base(2, 333, 500, 2, 1, 128);  // broadcast batch and heads, 256 x 256, a window
  w.window_left = 100, w.window_right = 20;
  std::mt19937_64 rng2(w.seed);
  w.blocks = random_blocks(rng2, w, 256, 256, 1, 1, 0.3, 0.3);
  w.blocks.transposes = true;
  check_gpu(w);
}

TEST(MaskSm90BlockSparse, BroadcastLargerBlocksAndFamilies) {
  SKIP_WITHOUT_HOPPER();
  MaskCase c = base(2, 1000, 700, 4, 1, 80);  // broadcast heads, 256 x 128
  std::mt19937_64 rng(c.seed);
  c.blocks = random_blocks(rng, c, 256, 128, 2, 1, 0.5, 0.3);
  check_gpu(c);
  MaskCase k = base(1, 600, 900, 2, 2, 128, 1);  // 128 x 256: two K/V tiles per listed block
  std::mt19937_64 rng4(k.seed);
  k.blocks = random_blocks(rng4, k, 128, 256, 1, 2, 0.5, 0.3);
  check_gpu(k);
  MaskCase d = base(2, 600, 600, 4, 2, 128, 1);  // with documents and causal partials
  std::mt19937_64 rng2(d.seed);
  same_documents(d, rng2, 8);
  d.blocks = random_blocks(rng2, d, 128, 128, 1, 4, 0.3, 0.3);
  check_gpu(d);
  MaskCase e = base(1, 500, 500, 2, 2, 128);  // everything skipped: O = 0, LSE = -inf, no step in any CTA
  std::mt19937_64 rng3(e.seed);
  e.blocks = random_blocks(rng3, e, 128, 128, 1, 1, 1.0, 0.0);
  check_gpu(e, true);
}

TEST(MaskSm90BlockSparse, MalformedTablesStayInBounds) {
  SKIP_WITHOUT_HOPPER();
  // d64: the forward (the backward runs on sm80); d128: the sm90 backward too, its walk from the
  // q_* transposes (malformed as well) and from the marks of kv_*.
  for (const int variant : {0, 1, 2}) {
    MaskCase c = base(2, 500, 500, 2, 1, variant == 0 ? 64 : 128);
    std::mt19937_64 rng(c.seed + variant);
    c.blocks = random_blocks(rng, c, 128, 128, 2, 2, 0.5, 0.3);
    c.blocks.transposes = variant == 1;
    MaskData md(c);
    SCOPED_TRACE(md.name());
    // Counts over the row and negative, indices out of range both ways: clamped and skipped on the
    // device; the guards must survive (values are unspecified).
    md.block_table(0)[0] = 1 << 30, md.block_table(0)[1] = -5;
    md.block_table(1)[0] = -1, md.block_table(1)[1] = 1 << 29, md.block_table(1)[2] = 4;
    md.block_table(2)[2] = 99, md.block_table(3)[3] = -7;
    if (c.blocks.transposes) {  // the same in q_* / full_q_*, and one block listed twice
      md.block_table(4)[0] = 1 << 30, md.block_table(4)[1] = -5;
      md.block_table(5)[0] = -1, md.block_table(5)[1] = 1 << 29, md.block_table(5)[2] = 4;
      md.block_table(5)[13] = md.block_table(5)[12];  // row 2 (6 entries a row): a duplicate if it lists two
      md.block_table(6)[2] = 99, md.block_table(7)[3] = -7;
    }
    DeviceCall call(md);
    ASSERT_TRUE(call.ok());
    std::string kernel;
    EXPECT_EQ(call.forward(&kernel), 0) << flashbox_last_error();
    EXPECT_NE(kernel.find("_masks"), std::string::npos) << kernel;
    if (variant == 0) continue;
    std::string bk;  // the guards around dq, dk, dv are checked by the call
    EXPECT_EQ(call.backward(0, &bk), 0) << flashbox_last_error();
    EXPECT_TRUE(starts_with(bk, "cuda_flash_bwd_sm90_d128_masks_blocks")) << bk;
  }
}

TEST(MaskSm90Varlen, VariableLengthBatches) {
  SKIP_WITHOUT_HOPPER();
  MaskCase c = base(1, 0, 0, 4, 2, 64, 1);  // documents across sequences of every length class
  c.lens_q = {1, 130, 700, 63, 257}, c.lens_k = {1, 130, 700, 65, 300};
  c.docs_q.resize(1 + 130 + 700 + 63 + 257), c.docs_k.resize(1 + 130 + 700 + 65 + 300);
  std::mt19937_64 rng(c.seed);
  for (int32_t &d : c.docs_q) d = int32_t(rng() % 4);
  std::sort(c.docs_q.begin(), c.docs_q.end());  // packed: sorted runs over the whole batch
  for (size_t j = 0; j < c.docs_k.size(); ++j) c.docs_k[j] = c.docs_q[j * c.docs_q.size() / c.docs_k.size()];
  check_gpu(c);
  MaskCase p = base(1, 0, 0, 2, 2, 128, 1);  // prefix, then chunk with a window, then seqused
  p.lens_q = {17, 300, 129}, p.lens_k = {40, 300, 500};
  p.prefix = {5, 150, 0};
  check_gpu(p);
  p.prefix.clear();
  p.causal = 0, p.attention_chunk = 100, p.window_left = 30, p.window_right = 10;
  check_gpu(p);
  p.attention_chunk = 0, p.window_left = p.window_right = -1, p.causal = 1;
  p.used_q = {17, 200, 0}, p.used_k = {3, 300, 129};
  check_gpu(p);
  MaskCase e = base(1, 0, 0, 2, 1, 64);  // a sequence with no key
  e.lens_q = {64, 100}, e.lens_k = {0, 100};
  e.prefix = {0, 20};
  check_gpu(e, true);
}

TEST(MaskSm90Fallback, CallsTheKernelsDoNotTakeRunOnSm80) {
  SKIP_WITHOUT_HOPPER();
  MaskCase h = base(2, 300, 300, 2, 1, 64, 1);  // fp16: the mask kernels are bf16 only
  h.dtype = FLASHBOX_FLOAT16;
  std::mt19937_64 rng(h.seed);
  same_documents(h, rng, 8);
  check_gpu(h, false, true);
  MaskCase w = base(1, 300, 300, 2, 2, 256, 1);  // head_dim 256
  w.prefix = {100};
  check_gpu(w, false, true);
}

}  // namespace
}  // namespace flashbox::test::sm90_mask

#undef SKIP_WITHOUT_HOPPER
