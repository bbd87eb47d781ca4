// flashbox_attention_ext's mask families on the GPU (the sm80 family, forward and backward; both are
// pinned to it, since on a Hopper the sm90 forward and backward take some of these calls, and every case
// asserts the kernel's name):
// document ids (8 and 32 packed documents straddling the 128-row blocks, scattered ids, with causal),
// prefix-LM, attention_chunk, seqused_q/k, and FlexAttention BlockMasks (random 50 % block-sparse,
// with and without full blocks, broadcast heads, 128 x 128 and 256 x 128 blocks, transposes given or
// not), at T = 1, 17, 63, 65, 1000, 4097, GQA, rows that see no key, bf16 and fp16 with outliers in
// q and k, against the fp64 reference of support/mask_case.hpp (seed printed; FLASHBOX_TEST_SEED=N
// repeats one). Outputs are poisoned and framed by guard bytes that must survive; the backward runs
// on the reference's O and LSE, atomic and deterministic dQ. Malformed device tables (indices out of
// range, counts over the row) must stay in bounds; block sizes the kernels cannot tile are refused.
// Every suite is named MaskSm80*: `ctest -R MaskSm80` runs them. Skipped, with the reason, where
// there is no GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/masks.hpp"
#include "flashbox/flashbox.h"
#include "support/device_buffers.hpp"
#include "support/family_pin.hpp"
#include "support/mask_case.hpp"
#include "support/mask_device_call.hpp"

namespace flashbox::test {
namespace {

namespace core = flashbox::core;

// The sm90 forward takes the bf16 fixed-length cases at head dims up to 128 as well, and the sm90
// backward the bf16 document-id and prefix-LM cases at head dims 72..128 (their suites:
// tests/sm90/sm90_mask_test.cpp), so every test here pins both passes to the family it tests (for
// itself: the program's other suites keep the library's choice): SKIP_WITHOUT_GPU_PIN_SM80,
// support/family_pin.hpp.

using mask_gpu::DeviceCall;
using mask_gpu::document_ids;
using mask_gpu::random_blocks;
using mask_gpu::same_documents;

// Forward and backward (both dQ modes) of one case on the GPU against the fp64 reference.
void check_gpu(const MaskCase &c, bool want_empty_rows = false) {
  MaskData md(c);
  SCOPED_TRACE(md.name());
  if (want_empty_rows) {
    EXPECT_GT(md.empty_rows(), 0) << "the case should hold rows that see no key";
  }
  DeviceCall call(md);
  ASSERT_TRUE(call.ok()) << "device allocation or copy";
  std::string kernel;
  ASSERT_EQ(call.forward(&kernel), 0) << flashbox_last_error();
  EXPECT_EQ(kernel.rfind("cuda_flash_sm80_", 0), 0u) << kernel;
  const Error eo = md.o_error();
  EXPECT_FALSE(eo.nan) << "o has NaN or inf (" << kernel << ")";
  EXPECT_LT(eo.rel, md.tolerance()) << "o (" << kernel << ")";
  EXPECT_LT(md.lse_error(), 2e-2) << "lse (" << kernel << ")";
  EXPECT_TRUE(md.unused_outputs_untouched()) << "rows past seqused_q were written";
  for (int det = 0; det <= 1; ++det) {
    std::string bk;
    ASSERT_EQ(call.backward(det, &bk), 0) << flashbox_last_error();
    EXPECT_EQ(bk.rfind("cuda_flash_bwd_sm80_", 0), 0u) << bk;
    const std::pair<const char *, Error> grads[] = {{"dq", md.dq_error()},
                                                    {"dk", md.dk_error()},
                                                    {"dv", md.dv_error()}};
    for (const auto &[name, err] : grads) {
      EXPECT_FALSE(err.nan) << name << " has NaN or inf (" << bk << ", deterministic " << det << ")";
      EXPECT_LT(err.rel, md.tolerance()) << name << " (" << bk << ", deterministic " << det << ")";
    }
  }
  std::printf("  %s: o %.2e, %s\n", md.name().c_str(), eo.rel, kernel.c_str());
}

MaskCase base(int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, flashbox_dtype t,
              int causal = 0) {
  MaskCase c;
  if (sq > 1000 && hq > 2) hq = 2, hkv = 1;  // long sequences: fewer heads (the fp64 reference's cost), still GQA
  c.batch = batch, c.seqlen_q = sq, c.seqlen_k = sk, c.heads_q = hq, c.heads_kv = hkv, c.head_dim = d;
  c.dtype = t, c.causal = causal, c.input_outliers = true;
  return c;
}

const int64_t kLengths[] = {1, 17, 63, 65, 1000, 4097};

TEST(MaskSm80Documents, PackedDocumentsForwardBackward) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  for (const int64_t t : kLengths)
    for (const int docs : {8, 32})
      for (const int causal : {0, 1}) {
        if (t == 4097 && (causal == 0 || docs == 8)) continue;  // the fp64 reference's cost
        MaskCase c = base(t > 1000 ? 1 : 2, t, t, 4, 2, t > 1000 ? 64 : 128,
                          docs == 8 ? FLASHBOX_BFLOAT16 : FLASHBOX_FLOAT16, causal);
        std::mt19937_64 rng(c.seed);
        same_documents(c, rng, docs);
        check_gpu(c);
      }
}

TEST(MaskSm80Documents, ScatteredIdsAndRowsThatSeeNoKey) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  // Scattered ids (any order), and query documents the keys lack: those rows see nothing.
  MaskCase c = base(2, 300, 257, 4, 1, 64, FLASHBOX_BFLOAT16);
  std::mt19937_64 rng(c.seed);
  c.docs_q = document_ids(rng, c.batch, c.seqlen_q, 6, true);
  c.docs_k = document_ids(rng, c.batch, c.seqlen_k, 4, true);
  check_gpu(c, true);
  MaskCase s = base(2, 200, 333, 2, 2, 256, FLASHBOX_FLOAT16, 1);
  std::mt19937_64 rng2(s.seed);
  same_documents(s, rng2, 8);
  check_gpu(s);
}

TEST(MaskSm80PrefixLm, PrefixWithCausalAndWindow) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  for (const int64_t t : {int64_t(1), int64_t(17), int64_t(65), int64_t(1000)}) {
    MaskCase c = base(3, t, t, 4, 2, 64, FLASHBOX_BFLOAT16, 1);
    c.prefix = {int32_t(t / 3), 0, int32_t(t)};
    check_gpu(c);
    c.causal = 0, c.window_left = 50, c.window_right = 0, c.dtype = FLASHBOX_FLOAT16, c.head_dim = 128;
    check_gpu(c);
  }
  MaskCase d = base(2, 700, 900, 2, 1, 64, FLASHBOX_BFLOAT16, 1);  // with documents
  d.prefix = {300, 5};
  std::mt19937_64 rng(d.seed);
  same_documents(d, rng, 8);
  check_gpu(d);
}

TEST(MaskSm80Chunk, ChunkedAttention) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  for (const int64_t t : {int64_t(17), int64_t(63), int64_t(1000), int64_t(4097)})
    for (const int64_t chunk : {int64_t(16), int64_t(100), int64_t(512)}) {
      if (t == 4097 && chunk != 512) continue;  // the fp64 reference's cost
      MaskCase c = base(t > 1000 ? 1 : 2, t, t + (t > 100 ? 37 : 0), 4, 2, 64, FLASHBOX_BFLOAT16, 1);
      c.attention_chunk = chunk;
      check_gpu(c);
    }
  MaskCase c = base(2, 300, 300, 2, 2, 128, FLASHBOX_FLOAT16);  // without causal, with a window
  c.attention_chunk = 64, c.window_left = 20;
  check_gpu(c);
}

TEST(MaskSm80Seqused, UsedLengths) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  MaskCase c = base(3, 300, 260, 4, 2, 64, FLASHBOX_BFLOAT16, 1);
  c.used_q = {300, 17, 0}, c.used_k = {1, 260, 100};
  check_gpu(c);
  MaskCase d = base(2, 1000, 1000, 2, 1, 128, FLASHBOX_FLOAT16);
  d.used_q = {999, 130};
  std::mt19937_64 rng(d.seed);
  same_documents(d, rng, 8);
  check_gpu(d);
}

TEST(MaskSm80BlockSparse, RandomHalfSparse) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  for (const int64_t t : kLengths)
    for (const double full : {0.0, 0.4}) {
      if (t == 4097 && full == 0.0) continue;  // the fp64 reference's cost
      MaskCase c = base(t > 1000 ? 1 : 2, t, t, 4, 2, t > 1000 ? 64 : 128,
                        full > 0 ? FLASHBOX_BFLOAT16 : FLASHBOX_FLOAT16, t % 2);
      std::mt19937_64 rng(c.seed);
      c.blocks = random_blocks(rng, c, 128, 128, c.batch, c.heads_q, 0.5, full);
      check_gpu(c);
    }
}

TEST(MaskSm80BlockSparse, BroadcastLargerBlocksTransposesAndFamilies) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  MaskCase c = base(2, 1000, 700, 4, 1, 64, FLASHBOX_BFLOAT16);  // broadcast heads, 256 x 128
  std::mt19937_64 rng(c.seed);
  c.blocks = random_blocks(rng, c, 256, 128, 2, 1, 0.5, 0.3);
  c.blocks.transposes = true;
  check_gpu(c);
  MaskCase d = base(2, 600, 600, 4, 2, 128, FLASHBOX_FLOAT16, 1);  // with documents and causal partials
  std::mt19937_64 rng2(d.seed);
  same_documents(d, rng2, 8);
  d.blocks = random_blocks(rng2, d, 128, 128, 1, 4, 0.3, 0.3);
  check_gpu(d);
  MaskCase e = base(1, 500, 500, 2, 2, 256, FLASHBOX_BFLOAT16);  // everything skipped: O = 0, LSE = -inf
  std::mt19937_64 rng3(e.seed);
  e.blocks = random_blocks(rng3, e, 128, 128, 1, 1, 1.0, 0.0);
  check_gpu(e, true);
}

TEST(MaskSm80BlockSparse, MalformedTablesStayInBounds) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  MaskCase c = base(2, 500, 500, 2, 1, 64, FLASHBOX_BFLOAT16);
  std::mt19937_64 rng(c.seed);
  c.blocks = random_blocks(rng, c, 128, 128, 2, 2, 0.5, 0.3);
  MaskData md(c);
  // Counts over the row and negative, indices out of range both ways: unchecked on the device,
  // clamped there; the guards must survive (values are unspecified).
  md.block_table(0)[0] = 1 << 30, md.block_table(0)[1] = -5;
  md.block_table(1)[0] = -1, md.block_table(1)[1] = 1 << 29, md.block_table(1)[2] = 4;
  md.block_table(2)[2] = 99, md.block_table(3)[3] = -7;
  DeviceCall call(md);
  ASSERT_TRUE(call.ok());
  std::string kernel;
  EXPECT_EQ(call.forward(&kernel), 0) << flashbox_last_error();
  for (int det = 0; det <= 1; ++det) EXPECT_EQ(call.backward(det, &kernel), 0) << flashbox_last_error();
}

TEST(MaskSm80BlockSparse, RefusesBlocksTheKernelsCannotTile) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  MaskCase c = base(1, 300, 300, 2, 2, 64, FLASHBOX_BFLOAT16);
  std::mt19937_64 rng(c.seed);
  c.blocks = random_blocks(rng, c, 64, 128, 1, 1, 0.5, 0.3);
  MaskData md(c);
  DeviceCall call(md);
  ASSERT_TRUE(call.ok());
  std::string kernel;
  EXPECT_EQ(call.forward(&kernel), FLASHBOX_ERR_UNSUPPORTED_IMPL);
  EXPECT_NE(std::string(flashbox_last_error()).find("multiples of 128"), std::string::npos) << flashbox_last_error();
  EXPECT_EQ(call.backward(0, &kernel), FLASHBOX_ERR_UNSUPPORTED_IMPL);
}

}  // namespace
}  // namespace flashbox::test
