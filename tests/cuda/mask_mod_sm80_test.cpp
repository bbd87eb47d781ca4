// Mask mods (flashbox_attention_ext.mask_mod: CUDA C++ compiled by NVRTC) on the GPU, in the sm80
// family, forward and backward (atomic and deterministic dQ), against the fp64 reference of
// support/mask_case.hpp run on the same mask written as data: document + causal as a mod over an aux
// tensor of ids (the reference: document ids with causal), a random block-sparse mod (the reference:
// a block mask whose partial blocks are causal), the same mod under the caller's own block mask
// (FlexAttention's path), a mod under which every row sees nothing (O = 0, LSE = -inf, zero
// gradients), mask_mod_broadcast, T = 1, 17, 1000, 4097 (not multiples of the 128 blocks), GQA,
// bf16 (< 1e-2 relative, NaN never passes; outputs poisoned first and framed by guard bytes). Refusals
// that need a device: a mod created for another architecture, aux tensors in host memory, block sizes
// the kernels cannot tile; nothing written. Every suite is named MaskModSm80*: `ctest -R MaskModSm80`.
// Skipped, with the reason, where there is no GPU (or no NVRTC to compile the mods).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "api/tuning.hpp"
#include "core/masks.hpp"
#include "flashbox/flashbox.h"
#include "support/family_pin.hpp"
#include "support/mask_mod_call.hpp"

namespace flashbox::test {
namespace {

using namespace mask_mod;

// On a Hopper the sm90 mask-family kernels take some of these calls (their suites:
// tests/sm90/sm90_mask_mod_test.cpp), so every test here pins both passes to the family it tests (for
// itself: the program's other suites keep the library's choice): SKIP_WITHOUT_GPU_PIN_SM80,
// support/family_pin.hpp.

const Kernels kSm80{"cuda_flash_sm80_", "", "cuda_flash_bwd_sm80_", "cuda_flash_bwd_sm80_"};

TEST(MaskModSm80DocCausal, ForwardBackwardAgainstDocumentIds) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  for (int64_t t : {1, 17, 1000, 4097}) check_doc_causal(2, t, 4, 2, t < 64 ? 2 : 8, 0, 64, kSm80);
}

TEST(MaskModSm80DocCausal, BroadcastOverHeadsAndGqa) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  check_doc_causal(2, 1000, 8, 1, 32, FLASHBOX_MOD_SAME_HEADS, 64, kSm80);
  check_doc_causal(1, 4097, 6, 2, 8, FLASHBOX_MOD_SAME_BATCH | FLASHBOX_MOD_SAME_HEADS, 64, kSm80);
}

TEST(MaskModSm80BlockSparse, RandomBlocksBuiltFromTheMod) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  for (int64_t t : {17, 1000, 4097}) check_block_sparse(2, t, 4, 2, false, false, kSm80);
}

TEST(MaskModSm80BlockSparse, UnderTheCallersBlockMask) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  for (int64_t t : {1, 1000}) check_block_sparse(1, t, 4, 1, true, false, kSm80);
}

// A mod false everywhere: every row sees nothing (O = 0, LSE = -inf), every gradient is 0.
TEST(MaskModSm80EmptyRows, NothingVisible) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  check_nothing_visible(64, kSm80);
}

// Refusals that need a device, nothing written (o keeps its poison).
TEST(MaskModSm80Refusals, WrongArchHostAuxBadBlocksScoreMods) {
  SKIP_WITHOUT_GPU_PIN_SM80();
  MaskCase c = bf16_case(1, 256, 2, 1, 64);
  c.blocks.q_block = c.blocks.kv_block = 64;
  c.blocks.kinds.assign(size_t(4 * 4), core::kBlockPartial);
  c.causal = 1;
  MaskData md(c);
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  Mod causal(kCausal, "causal", {});
  CREATE_OR_SKIP(causal);
  Mod other(kCausal, "causal", {}, major == 9 ? 80 : 90);  // compiled for an architecture this device is not
  ASSERT_EQ(other.rc, FLASHBOX_OK) << other.why;
  Mod doc(kDocCausal, "doc_causal", {{"doc", FLASHBOX_AUX_INT32, 2}});
  ASSERT_EQ(doc.rc, FLASHBOX_OK) << doc.why;
  std::vector<int32_t> host_ids(256, 0);
  const flashbox_aux_tensor host_doc = [&] {
    flashbox_aux_tensor t = device_tensor(host_ids.data(), FLASHBOX_AUX_INT32, {1, 256});
    t.device = FLASHBOX_CPU;  // declared on the host: refused as on the wrong device
    return t;
  }();
  flashbox_aux_tensor lying_doc = device_tensor(host_ids.data(), FLASHBOX_AUX_INT32, {1, 256});  // host memory, said cuda
  struct Case {
    const char *what;
    ModCall::Edit edit;
    int code;
    const char *mention;
  };
  const Case cases[] = {
      {"another arch",
       [&](auto &a, auto &e) { a.causal = 0, e.block_mask = nullptr, e.mask_mod = other.handle; },
       FLASHBOX_ERR_UNSUPPORTED_IMPL, "not for this device"},
      {"aux declared on the host",
       [&](auto &a, auto &e) { a.causal = 0, e.block_mask = nullptr, e.mask_mod = doc.handle, e.mask_mod_aux = &host_doc; },
       FLASHBOX_ERR_INVALID_ARGUMENT, "device = cpu"},
      {"aux in host memory",
       [&](auto &a, auto &e) { a.causal = 0, e.block_mask = nullptr, e.mask_mod = doc.handle, e.mask_mod_aux = &lying_doc; },
       FLASHBOX_ERR_INVALID_ARGUMENT, "mask_mod_aux[0]"},
      {"64 x 64 blocks", [&](auto &a, auto &e) { a.causal = 0, e.mask_mod = causal.handle; },
       FLASHBOX_ERR_UNSUPPORTED_IMPL, "multiples of 128"},
      {"broadcast without a mod", [&](auto &, auto &e) { e.block_mask = nullptr, e.mask_mod_broadcast = 1; },
       FLASHBOX_ERR_INVALID_ARGUMENT, "mask_mod_broadcast"},
      {"broadcast bits", [&](auto &, auto &e) { e.block_mask = nullptr, e.mask_mod = causal.handle, e.mask_mod_broadcast = 4; },
       FLASHBOX_ERR_INVALID_ARGUMENT, "mask_mod_broadcast = 4"},
  };
  for (const Case &k : cases) {
    SCOPED_TRACE(k.what);
    ModCall call(md, k.edit);
    ASSERT_TRUE(call.ok());
    std::string kernel;
    EXPECT_EQ(call.forward(&kernel), k.code) << flashbox_last_error();
    EXPECT_NE(std::string(flashbox_last_error()).find(k.mention), std::string::npos) << flashbox_last_error();
    EXPECT_EQ(md.first_written_o_byte(), -1) << "o was written";
    EXPECT_EQ(call.backward(0, &kernel), k.code) << flashbox_last_error();
  }
}

}  // namespace
}  // namespace flashbox::test
