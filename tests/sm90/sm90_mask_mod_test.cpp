// Mask mods (flashbox_attention_ext.mask_mod) on the Hopper mask-family kernels: the sm90 forward's
// MaskExtConfig kernels and the sm90 backward's kBwdD128MasksDqLag read the mod's bit tiles in
// partial blocks (src/cuda/forward/sm90/mask_walk.cuh, src/cuda/backward/sm90/bwd_sm90_consumer.cuh),
// against the fp64 reference of support/mask_case.hpp run on the same mask written as data:
// document + causal as a mod (the reference: document ids with causal), queries' and keys' documents
// apart as a mod with rows whose document the keys lack (they see no key: O = 0, LSE = -inf, zero
// gradients), a random block-sparse mod with causal partial blocks (the block mask built from the
// mod, or the caller's with and without the q_* transposes), mask_mod_broadcast over heads and
// batch, GQA, T = 17, 1000, 4097 (not multiples of the 128 blocks), head dims 128, 80 (the d128
// kernels) and 64 (the forward's d64 kernel; its backward is the sm80 family's), bf16 with outliers
// (< 1e-2 relative, NaN never passes; outputs poisoned first and framed by guard bytes). Every
// forward must run an sm90 `_masks` kernel, every non-deterministic backward at head dims 72..128 the
// sm90 mask kernel (`cuda_flash_bwd_sm90_d128_masks_blocks...`); deterministic calls land on the sm80
// family (the sm90 route declines them with its reason). Suites MaskModSm90*: `ctest -R MaskModSm90`.
// Skipped, with the reason, without a Hopper GPU (or without NVRTC to compile the mods).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flashbox/flashbox.h"
#include "sm90/hopper_device.hpp"
#include "support/mask_case.hpp"
#include "support/mask_device_call.hpp"
#include "support/mask_mod_call.hpp"

namespace flashbox::test::sm90_mask_mod {
namespace {

using namespace mask_mod;

#define SKIP_WITHOUT_HOPPER()                                                    \
  do {                                                                           \
    std::string why_;                                                            \
    if (!have_hopper(why_)) GTEST_SKIP() << "sm90 mask mods not run: " << why_; \
  } while (0)

// Head dims 72..128: both passes on the sm90 mask kernels; head_dim 64: the forward only.
const Kernels kSm90{"cuda_flash_sm90_d128_128x128_masks", "", "cuda_flash_bwd_sm90_d128_masks_blocks",
                    "cuda_flash_bwd_sm80_"};
const Kernels kSm90ForwardD64{"cuda_flash_sm90_d64_128x128_masks", "", "cuda_flash_bwd_sm80_", "cuda_flash_bwd_sm80_"};

TEST(MaskModSm90DocCausal, ForwardBackwardAgainstDocumentIds) {
  SKIP_WITHOUT_HOPPER();
  for (int64_t t : {17, 1000}) check_doc_causal(2, t, 4, 2, t < 64 ? 2 : 8, 0, 128, kSm90);
  check_doc_causal(1, 4097, 2, 1, 8, 0, 128, kSm90);
  check_doc_causal(2, 1000, 4, 2, 8, 0, 80, kSm90);  // head_dim 80 on the d128 kernels
  check_doc_causal(2, 1000, 4, 2, 8, 0, 64, kSm90ForwardD64);
}

TEST(MaskModSm90DocCausal, BroadcastOverHeadsAndBatchWithGqa) {
  SKIP_WITHOUT_HOPPER();
  check_doc_causal(2, 1000, 8, 1, 32, FLASHBOX_MOD_SAME_HEADS, 128, kSm90);
  check_doc_causal(1, 4097, 4, 2, 8, FLASHBOX_MOD_SAME_BATCH | FLASHBOX_MOD_SAME_HEADS, 128, kSm90);
}

// The case's documents (queries' and keys' ids apart) and causal as the mod doc_qk_causal, checked
// against the same mask as data.
void check_documents_as_mod(MaskData &md) {
  const MaskCase &c = md.config();
  Mod mod(kDocQkCausal, "doc_qk_causal", {{"dq", FLASHBOX_AUX_INT32, 2}, {"dk", FLASHBOX_AUX_INT32, 2}});
  CREATE_OR_SKIP(mod);
  flashbox_aux_tensor aux[2] = {};
  ModCall call(md, [&](flashbox_attention_args &a, flashbox_attention_ext &e) {
    a.causal = 0;
    e.document_ids_q = e.document_ids_k = nullptr;
    e.mask_mod = mod.handle, e.mask_mod_aux = aux;
  });
  aux[0] = device_tensor(call.up(c.docs_q.data(), c.docs_q.size() * 4), FLASHBOX_AUX_INT32, {c.batch, c.seqlen_q});
  aux[1] = device_tensor(call.up(c.docs_k.data(), c.docs_k.size() * 4), FLASHBOX_AUX_INT32, {c.batch, c.seqlen_k});
  check_against_reference(md, call, kSm90);
}

// Queries' and keys' documents apart (scattered ids, keys lacking some of the queries' documents),
// with causal: rows that see no key inside partial blocks, whose bits are all 0.
TEST(MaskModSm90EmptyRows, RowsWhoseDocumentTheKeysLack) {
  SKIP_WITHOUT_HOPPER();
  MaskCase c = bf16_case(2, 1000, 4, 2, 128);
  std::mt19937_64 rng(c.seed);
  c.docs_q = mask_gpu::document_ids(rng, c.batch, c.seqlen_q, 6, true);
  c.docs_k = mask_gpu::document_ids(rng, c.batch, c.seqlen_k, 4, true);
  c.causal = 1;
  MaskData md(c);
  SCOPED_TRACE(md.name());
  ASSERT_GT(md.empty_rows(), 0) << "the case should hold rows that see no key";
  check_documents_as_mod(md);
}

TEST(MaskModSm90BlockSparse, RandomBlocksBuiltFromTheMod) {
  SKIP_WITHOUT_HOPPER();
  for (int64_t t : {17, 1000}) check_block_sparse(2, t, 4, 2, false, false, kSm90);
  check_block_sparse(1, 4097, 2, 1, false, false, kSm90);
}

// The caller's block mask (shuffled lists, garbage past the counts): without q_* the backward's walk
// comes from kv_*'s marks, with them from q_*, the mod's entries from kv_* either way.
TEST(MaskModSm90BlockSparse, UnderTheCallersBlockMask) {
  SKIP_WITHOUT_HOPPER();
  for (const bool transposes : {false, true}) check_block_sparse(1, 1000, 4, 1, true, transposes, kSm90);
}

// Scattered document ids as a mod (queries' and keys' ids apart, with causal) under the caller's block
// mask of q_block x kv_block blocks (random kinds per query head, with or without q_*): every
// partial block has structure at every row and key that only the mod's bits give (a bit read for
// the wrong row, key, entry or head fails), with several 128-key tiles per mask block (the forward's
// tiles_per_block, the backward's CTAs inside one mask key block) and several 128-row forward tiles /
// 64-row backward steps per mask row; T 1000 is a multiple of neither.
void check_scattered_under_blocks(int64_t q_block, int64_t kv_block, bool transposes) {
  MaskCase c = bf16_case(1, 1000, 4, 2, 128);
  std::mt19937_64 rng(c.seed);
  c.docs_q = mask_gpu::document_ids(rng, c.batch, c.seqlen_q, 3, true);
  c.docs_k = mask_gpu::document_ids(rng, c.batch, c.seqlen_k, 3, true);
  c.causal = 1;  // the reference's partial blocks: documents and causal, as the mod
  const int64_t nq = (c.seqlen_q + q_block - 1) / q_block, nk = (c.seqlen_k + kv_block - 1) / kv_block;
  c.blocks.q_block = q_block, c.blocks.kv_block = kv_block;
  c.blocks.batches = 1, c.blocks.heads = c.heads_q, c.blocks.transposes = transposes;
  c.blocks.kinds.resize(size_t(c.heads_q * nq * nk));
  std::uniform_int_distribution<int> pick(0, 3);  // partial blocks twice as likely as the others
  for (uint8_t &k : c.blocks.kinds) {
    const int v = pick(rng);
    k = v == 0 ? core::kBlockSkipped : v == 1 ? core::kBlockFull : core::kBlockPartial;
  }
  MaskData md(c);
  SCOPED_TRACE(md.name());
  check_documents_as_mod(md);
}

TEST(MaskModSm90BlockSparse, ScatteredBitsUnderLargeBlocks) {
  SKIP_WITHOUT_HOPPER();
  check_scattered_under_blocks(128, 128, false);
  check_scattered_under_blocks(256, 384, false);
  check_scattered_under_blocks(384, 256, true);
}

// A mod false everywhere: no block is listed, every row sees nothing (O = 0, LSE = -inf), every
// gradient is 0, still on the sm90 kernels.
TEST(MaskModSm90EmptyRows, NothingVisible) {
  SKIP_WITHOUT_HOPPER();
  check_nothing_visible(128, kSm90);
}

}  // namespace
}  // namespace flashbox::test::sm90_mask_mod

#undef SKIP_WITHOUT_HOPPER
