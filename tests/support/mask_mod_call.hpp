// The mask-mod GPU tests' shared pieces (tests/cuda/mask_mod_sm80_test.cpp, tests/sm90/sm90_mask_mod_test.cpp):
// a compiled mod (Mod, skipped where NVRTC is missing), the mods both suites run, aux tensors on the
// device, ModCall (a MaskData's inputs on the device and the call edited into the mod's, forward and
// backward with poisoned, guard-framed outputs), and the checks of one call against the fp64
// reference of the same mask written as data, with the kernels that must run named by the caller.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/masks.hpp"
#include "flashbox/flashbox.h"
#include "support/device_buffers.hpp"
#include "support/mask_case.hpp"
#include "support/mask_device_call.hpp"

namespace flashbox::test::mask_mod {

namespace core = flashbox::core;

// A compiled mod, destroyed with the test; null (and the test skipped) where NVRTC is missing.
struct Mod {
  flashbox_mod handle = nullptr;
  Mod(const char *source, const char *name, std::vector<flashbox_aux_decl> aux, int32_t arch = 0) {
    flashbox_mod_desc d{};
    d.struct_size = sizeof d;
    d.kind = FLASHBOX_MOD_MASK;
    d.source = source, d.function_name = name;
    d.num_aux = int32_t(aux.size()), d.aux = aux.empty() ? nullptr : aux.data();
    d.arch = arch;
    rc = flashbox_mod_create(&d, &handle);
    if (rc) why = flashbox_last_error();
  }
  ~Mod() { flashbox_mod_destroy(handle); }
  int rc = 0;
  std::string why;
};

#define CREATE_OR_SKIP(mod)                                                                          \
  if ((mod).rc == FLASHBOX_ERR_UNSUPPORTED_IMPL) GTEST_SKIP() << "no NVRTC: " << (mod).why;           \
  ASSERT_EQ((mod).rc, FLASHBOX_OK) << (mod).why

inline constexpr char kDocCausal[] =
    "bool doc_causal(int b, int h, int q_idx, int kv_idx, const fbx::Aux &aux) {\n"
    "  return aux.doc(b, q_idx) == aux.doc(b, kv_idx) && kv_idx <= q_idx;\n"
    "}\n";
// keep(b?, qb, kb): 0 skipped, 1 every element, 2 causal inside the block (128 x 128 blocks).
inline constexpr char kBlockSparse[] =
    "bool block_sparse(int b, int h, int q_idx, int kv_idx, const fbx::Aux &aux) {\n"
    "  const int k = aux.keep(h, q_idx / 128, kv_idx / 128);\n"
    "  return k == 1 || (k == 2 && kv_idx <= q_idx);\n"
    "}\n";
inline constexpr char kCausal[] = "bool causal(int b, int h, int q_idx, int kv_idx) { return kv_idx <= q_idx; }\n";
inline constexpr char kNothing[] = "bool nothing(int b, int h, int q_idx, int kv_idx) { return false; }\n";
// Documents of queries and keys apart (aux dq, dk: [batch, seqlen]) with causal: a query whose
// document the keys lack sees no key.
inline constexpr char kDocQkCausal[] =
    "bool doc_qk_causal(int b, int h, int q_idx, int kv_idx, const fbx::Aux &aux) {\n"
    "  return aux.dq(b, q_idx) == aux.dk(b, kv_idx) && kv_idx <= q_idx;\n"
    "}\n";

inline flashbox_aux_tensor device_tensor(const void *data, flashbox_aux_dtype dtype, std::vector<int64_t> sizes) {
  flashbox_aux_tensor t{};
  t.data = data, t.dtype = dtype, t.rank = int32_t(sizes.size()), t.device = FLASHBOX_CUDA;
  int64_t stride = 1;
  for (int r = t.rank - 1; r >= 0; --r) t.sizes[r] = sizes[size_t(r)], t.strides[r] = stride, stride *= sizes[size_t(r)];
  return t;
}

// A MaskData's inputs on the device, each call edited into the mod's (documents, causal, block mask
// as data turned into the mod and its aux tensors) before it runs.
using ModCall = mask_gpu::DeviceCall;

// The kernels a check expects, by name prefix: the forward's (and a part its name contains), and the
// backward's without and with deterministic dQ.
struct Kernels {
  std::string forward, forward_part, backward, backward_deterministic;
};

// Forward and backward (both dQ modes) of the mod's call against the reference of `md`, each on the
// kernels `want` names.
inline void check_against_reference(MaskData &md, ModCall &call, const Kernels &want) {
  ASSERT_TRUE(call.ok()) << "device allocation or copy";
  std::string kernel;
  ASSERT_EQ(call.forward(&kernel), 0) << flashbox_last_error();
  EXPECT_EQ(kernel.rfind(want.forward, 0), 0u) << kernel;
  EXPECT_NE(kernel.find(want.forward_part), std::string::npos) << kernel;
  const Error eo = md.o_error();
  EXPECT_FALSE(eo.nan) << "o has NaN or inf (" << kernel << ")";
  EXPECT_LT(eo.rel, md.tolerance()) << "o (" << kernel << ")";
  EXPECT_LT(md.lse_error(), 2e-2) << "lse (" << kernel << ")";
  for (int det = 0; det <= 1; ++det) {
    std::string bk;
    ASSERT_EQ(call.backward(det, &bk), 0) << flashbox_last_error();
    EXPECT_EQ(bk.rfind(det ? want.backward_deterministic : want.backward, 0), 0u) << bk;
    const std::pair<const char *, Error> grads[] = {{"dq", md.dq_error()}, {"dk", md.dk_error()}, {"dv", md.dv_error()}};
    for (const auto &[name, err] : grads) {
      EXPECT_FALSE(err.nan) << name << " has NaN or inf (deterministic " << det << ", " << bk << ")";
      EXPECT_LT(err.rel, md.tolerance()) << name << " (deterministic " << det << ", " << bk << ")";
    }
  }
}

inline MaskCase bf16_case(int64_t batch, int64_t t, int64_t heads_q, int64_t heads_kv, int64_t head_dim) {
  MaskCase c;
  c.batch = batch, c.seqlen_q = c.seqlen_k = t, c.heads_q = heads_q, c.heads_kv = heads_kv, c.head_dim = head_dim;
  c.dtype = FLASHBOX_BFLOAT16;
  c.input_outliers = true;
  return c;
}

// Sorted document ids of `rows` tokens per batch entry (`docs` runs of random lengths).
inline std::vector<int32_t> packed_documents(std::mt19937_64 &rng, int64_t batch, int64_t rows, int docs) {
  std::vector<int32_t> ids(size_t(batch * rows));
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> cuts;
    for (int d = 1; d < docs; ++d) cuts.push_back(std::uniform_int_distribution<int64_t>(0, rows)(rng));
    std::sort(cuts.begin(), cuts.end());
    for (int64_t i = 0; i < rows; ++i)
      ids[size_t(b * rows + i)] = int32_t(std::upper_bound(cuts.begin(), cuts.end(), i) - cuts.begin());
  }
  return ids;
}

// Document + causal as a mod (ids in an aux tensor), against document ids with causal as data.
inline void check_doc_causal(int64_t batch, int64_t t, int64_t heads_q, int64_t heads_kv, int docs, int32_t broadcast,
                             int64_t head_dim, const Kernels &want) {
  MaskCase c = bf16_case(batch, t, heads_q, heads_kv, head_dim);
  std::mt19937_64 rng(c.seed);
  c.docs_q = packed_documents(rng, batch, t, docs);
  c.docs_k = c.docs_q;
  c.causal = 1;
  MaskData md(c);
  SCOPED_TRACE(md.name() + " broadcast " + std::to_string(broadcast));
  Mod mod(kDocCausal, "doc_causal", {{"doc", FLASHBOX_AUX_INT32, 2}});
  CREATE_OR_SKIP(mod);
  flashbox_aux_tensor doc{};  // set below, once the call has put the ids on the device
  ModCall call(md, [&](flashbox_attention_args &a, flashbox_attention_ext &e) {
    a.causal = 0;
    e.document_ids_q = e.document_ids_k = nullptr;
    e.mask_mod = mod.handle, e.mask_mod_aux = &doc, e.mask_mod_broadcast = broadcast;
  });
  doc = device_tensor(call.up(c.docs_q.data(), c.docs_q.size() * 4), FLASHBOX_AUX_INT32, {batch, t});
  check_against_reference(md, call, want);
}

// keep[h][qb][kb] in {0, 1, 2} at random; the reference: a 128 x 128 block mask whose partial blocks
// (2) are causal inside, with the call's causal flag.
inline std::vector<uint8_t> random_keep(std::mt19937_64 &rng, int64_t heads, int64_t nq, int64_t nk) {
  std::vector<uint8_t> keep(size_t(heads * nq * nk));
  std::uniform_int_distribution<int> pick(0, 2);
  for (uint8_t &k : keep) k = uint8_t(pick(rng));
  return keep;
}

// keep as a mod (FLASHBOX_MOD_SAME_BATCH), the block mask built from it or the caller's (with the
// q_* transposes or without), against the reference's block mask with causal partial blocks.
inline void check_block_sparse(int64_t batch, int64_t t, int64_t heads_q, int64_t heads_kv, bool callers_block_mask,
                               bool transposes, const Kernels &want) {
  MaskCase c = bf16_case(batch, t, heads_q, heads_kv, 128);
  std::mt19937_64 rng(c.seed);
  const int64_t nq = (t + 127) / 128, nk = nq;
  const std::vector<uint8_t> keep = random_keep(rng, heads_q, nq, nk);
  c.blocks.q_block = c.blocks.kv_block = 128;
  c.blocks.batches = 1, c.blocks.heads = heads_q, c.blocks.transposes = transposes;
  c.blocks.kinds.resize(keep.size());
  for (size_t i = 0; i < keep.size(); ++i)
    c.blocks.kinds[i] = keep[i] == 0 ? core::kBlockSkipped : keep[i] == 1 ? core::kBlockFull : core::kBlockPartial;
  c.causal = 1;  // the reference's partial blocks: causal inside
  MaskData md(c);
  SCOPED_TRACE(md.name() + (callers_block_mask ? " with the caller's block mask" : " block mask built from the mod"));
  Mod mod(kBlockSparse, "block_sparse", {{"keep", FLASHBOX_AUX_UINT8, 3}});
  CREATE_OR_SKIP(mod);
  flashbox_aux_tensor keep_t{};
  ModCall call(md, [&](flashbox_attention_args &a, flashbox_attention_ext &e) {
    a.causal = 0;
    if (!callers_block_mask) e.block_mask = nullptr;
    e.mask_mod = mod.handle, e.mask_mod_aux = &keep_t, e.mask_mod_broadcast = FLASHBOX_MOD_SAME_BATCH;
  });
  keep_t = device_tensor(call.up(keep.data(), keep.size()), FLASHBOX_AUX_UINT8, {heads_q, nq, nk});
  check_against_reference(md, call, want);
}

// A mod false everywhere (no block mask given: none is built, no block listed): every row sees nothing
// (O = 0, LSE = -inf), every gradient is 0.
inline void check_nothing_visible(int64_t head_dim, const Kernels &want) {
  MaskCase c = bf16_case(2, 1000, 4, 2, head_dim);
  c.blocks.q_block = c.blocks.kv_block = 128;
  c.blocks.kinds.assign(size_t(8 * 8), core::kBlockSkipped);
  MaskData md(c);
  SCOPED_TRACE(md.name());
  ASSERT_GT(md.empty_rows(), 0);
  Mod mod(kNothing, "nothing", {});
  CREATE_OR_SKIP(mod);
  ModCall call(md, [&](flashbox_attention_args &, flashbox_attention_ext &e) {
    e.block_mask = nullptr;
    e.mask_mod = mod.handle;
  });
  check_against_reference(md, call, want);
}

}  // namespace flashbox::test::mask_mod
