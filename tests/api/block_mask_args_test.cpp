// Refusals of malformed block masks (flashbox_block_mask), document ids and prefix lengths: every
// check of src/api/block_mask.hpp and of the mask families in src/api/ext_validate.cpp, forward and
// backward, each with its code, a message naming the field and its value, and nothing written;
// device = cuda and variable-length calls refuse block masks; an older struct_size never reads the
// new fields.
#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/masks.hpp"
#include "support/mask_case.hpp"

using flashbox::test::expect_call_refused;
using flashbox::test::MaskCase;
using flashbox::test::MaskData;
namespace core = flashbox::core;

namespace {

// 2 batch entries, 2 heads, seqlen 40 (q) and 50 (k), blocks 16 x 16: 3 q blocks, 4 kv blocks; a
// causal-like block mask with full and partial blocks and the transposes.
MaskCase block_case() {
  MaskCase c;
  c.batch = 2, c.seqlen_q = 40, c.seqlen_k = 50, c.heads_q = 2, c.heads_kv = 1, c.causal = 1;
  c.blocks.q_block = 16, c.blocks.kv_block = 16, c.blocks.batches = 2, c.blocks.heads = 1;
  c.blocks.transposes = true, c.blocks.pad = 1;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t k = 0; k < 4; ++k)
        c.blocks.kinds.push_back(k < r ? core::kBlockFull : k <= r + 1 ? core::kBlockPartial : core::kBlockSkipped);
  return c;
}

struct Bad {
  const char *what;
  int code;
  std::vector<std::string> mentions;
  std::function<void(MaskData &, flashbox_block_mask &, flashbox_attention_ext &)> edit;
  bool forward_only = false;  // the edit points into o or lse, the backward's inputs
  flashbox_device device = FLASHBOX_CPU;
};

// The forward and the backward refuse `e` (after `edit`) with `code`, naming `mentions`, nothing written.
void expect_refused(MaskData &d, const Bad &bad) {
  SCOPED_TRACE(bad.what);
  flashbox_block_mask bm = d.block_mask();
  flashbox_attention_ext e = d.ext();
  e.block_mask = &bm;
  bad.edit(d, bm, e);
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  flashbox_attention_grad_args g = d.grad_args(FLASHBOX_BLOCKED);
  a.device = g.fwd.device = bad.device;
  SCOPED_TRACE("forward");
  expect_call_refused(
      d, [&] { return flashbox_attention_forward_ext(&a, &e); }, bad.code, bad.mentions);
  if (bad.forward_only) return;
  SCOPED_TRACE("backward");
  expect_call_refused(
      d, [&] { return flashbox_attention_backward_ext(&g, &e); }, bad.code, bad.mentions);
}

TEST(BlockMaskArgs, TheCaseItselfRuns) {
  MaskData d(block_case());
  ASSERT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_LT(d.o_error().rel, 1e-5);
  ASSERT_EQ(d.backward(FLASHBOX_NAIVE), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_LT(d.dq_error().rel, 1e-4);
}

TEST(BlockMaskArgs, ShapesPointersAndSizes) {
  MaskData d(block_case());
  using M = MaskData;
  using B = flashbox_block_mask;
  using E = flashbox_attention_ext;
  const Bad cases[] = {
      {"struct_size",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"block_mask->struct_size = 8", "sizeof(flashbox_block_mask)"},
       [](M &, B &b, E &) { b.struct_size = 8; }},
      {"batch", FLASHBOX_ERR_INVALID_SIZE, {"block_mask->batch = 3", "batch = 2"}, [](M &, B &b, E &) { b.batch = 3; }},
      {"heads",
       FLASHBOX_ERR_INVALID_SIZE,
       {"block_mask->heads = 0", "heads_q = 2"},
       [](M &, B &b, E &) { b.heads = 0; }},
      {"block size",
       FLASHBOX_ERR_INVALID_SIZE,
       {"kv_block_size = 0", ">= 1"},
       [](M &, B &b, E &) { b.kv_block_size = 0; }},
      {"kv_num_blocks null",
       FLASHBOX_ERR_NULL_POINTER,
       {"kv_num_blocks is NULL"},
       [](M &, B &b, E &) { b.kv_num_blocks = nullptr; }},
      {"kv_indices null",
       FLASHBOX_ERR_NULL_POINTER,
       {"kv_indices is NULL"},
       [](M &, B &b, E &) { b.kv_indices = nullptr; }},
      {"full pair",
       FLASHBOX_ERR_NULL_POINTER,
       {"full_kv_indices is NULL", "full_kv_num_blocks is set"},
       [](M &, B &b, E &) { b.full_kv_indices = nullptr; }},
      {"q pair",
       FLASHBOX_ERR_NULL_POINTER,
       {"q_num_blocks is NULL", "q_indices is set"},
       [](M &, B &b, E &) { b.q_num_blocks = nullptr; }},
      {"full_q missing",
       FLASHBOX_ERR_NULL_POINTER,
       {"full_q_num_blocks is NULL"},
       [](M &, B &b, E &) { b.full_q_num_blocks = nullptr, b.full_q_indices = nullptr; }},
      {"full_q without q",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"full_q_num_blocks is set without q_num_blocks"},
       [](M &, B &b, E &) { b.q_num_blocks = nullptr, b.q_indices = nullptr; }},
      {"full_q without full_kv",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"without full_kv_num_blocks"},
       [](M &, B &b, E &) { b.full_kv_num_blocks = nullptr, b.full_kv_indices = nullptr; }},
      {"max_kv_blocks", FLASHBOX_ERR_INVALID_SIZE, {"max_kv_blocks = 0"}, [](M &, B &b, E &) { b.max_kv_blocks = 0; }},
      {"max_q_blocks", FLASHBOX_ERR_INVALID_SIZE, {"max_q_blocks = -1"}, [](M &, B &b, E &) { b.max_q_blocks = -1; }},
      {"overflow",
       FLASHBOX_ERR_SIZE_OVERFLOW,
       {"overflow int64"},
       [](M &, B &b, E &) { b.max_kv_blocks = int64_t(1) << 62; }},
      {"misaligned",
       FLASHBOX_ERR_MISALIGNED,
       {"kv_indices", "4-byte aligned"},
       [](M &, B &b, E &) {
         b.kv_indices = reinterpret_cast<const int32_t *>(reinterpret_cast<const char *>(b.kv_indices) + 2);
       }},
      {"inside an output",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"overlaps block_mask->kv_num_blocks"},
       [](M &m, B &b, E &) { b.kv_num_blocks = reinterpret_cast<const int32_t *>(m.lse().data()); },
       true},
  };
  for (const Bad &bad : cases) expect_refused(d, bad);
}

TEST(BlockMaskArgs, TableValues) {
  MaskData d(block_case());
  using M = MaskData;
  using B = flashbox_block_mask;
  using E = flashbox_attention_ext;
  // Row (b 1, h 0, q block 2) of kv_*: tables_[0..1]; its entries start at (1 * 3 + 2) * width.
  const int64_t width = d.block_mask().max_kv_blocks, row = 1 * 3 + 2;
  auto edited = [](int which, int64_t at, int32_t value) {
    return [which, at, value](M &m, B &, E &) { m.block_table(which)[size_t(at)] = value; };
  };
  const int32_t n = d.block_table(0)[size_t(row)];  // partial blocks of that row (2: blocks 2, 3)
  ASSERT_EQ(n, 2);
  const Bad cases[] = {
      {"negative count",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"kv_num_blocks[1][0][2] = -1", "outside [0, 4]"},
       edited(0, row, -1)},
      {"count over the row",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"kv_num_blocks[1][0][2] = 5", "outside [0, 4]"},
       edited(0, row, 5)},
      {"index out of range",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"kv_indices[1][0][2][1] = 4", "outside [0, 4)"},
       edited(1, row * width + 1, 4)},
      {"negative index", FLASHBOX_ERR_INVALID_ARGUMENT, {"kv_indices[1][0][2][0] = -3"}, edited(1, row * width, -3)},
      {"duplicate in a row",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"kv_indices[1][0][2][1]", "already lists"},
       [&](M &m, B &, E &) { m.block_table(1)[size_t(row * width + 1)] = m.block_table(1)[size_t(row * width)]; }},
      {"partial and full",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"full_kv_indices[1][0][2][0]", "partial or full, not both"},
       [&](M &m, B &, E &) { m.block_table(3)[size_t(row * width)] = m.block_table(1)[size_t(row * width)]; }},
      {"q count inconsistent",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"q_num_blocks[0][0][3] = 0", "transposes"},
       edited(4, 3, 0)},
      {"q index inconsistent",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"q_indices[0][0][0][0] = 2", "does not list key block 0"},
       edited(5, 0, 2)},
  };
  for (const Bad &bad : cases) {
    MaskData fresh(block_case());  // each edit on untouched tables
    expect_refused(fresh, bad);
  }
}

TEST(BlockMaskArgs, CudaTakesItVariableLengthRefuses) {
  // The CUDA sm80 family takes block masks (tests/cuda/mask_sm80_test.cpp): never refused as a
  // cpu-only field; variable-length calls refuse one on every device.
  MaskData d(block_case());
  flashbox_attention_args c = d.forward_args(FLASHBOX_AUTO);
  c.device = FLASHBOX_CUDA;
  flashbox::test::expect_cuda_takes(
      d, [&] { return flashbox_attention_forward_ext(&c, &d.ext()); }, "block_mask");
  MaskCase v;
  v.lens_q = {4, 6}, v.lens_k = {5, 2};
  v.blocks.kinds.assign(1, core::kBlockFull), v.blocks.q_block = 16, v.blocks.kv_block = 16;
  MaskData dv(v);
  const flashbox_attention_args a = dv.forward_args(FLASHBOX_NAIVE);
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &dv.ext()), FLASHBOX_ERR_UNSUPPORTED_IMPL);
  EXPECT_NE(std::string(flashbox_last_error()).find("block_mask with cu_seqlens"), std::string::npos)
      << flashbox_last_error();
}

TEST(MaskFamilyArgs, DocumentsAndPrefix) {
  MaskCase c;
  c.batch = 2, c.seqlen_q = 17, c.seqlen_k = 30, c.causal = 1;
  c.docs_q.assign(2 * 17, 0), c.docs_k.assign(2 * 30, 0), c.prefix = {0, 30};
  MaskData d(c);
  const flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  auto refused = [&](flashbox_attention_ext e, flashbox_device device, int code, const std::vector<std::string> &ms) {
    flashbox_attention_args x = a;
    x.device = device;
    expect_call_refused(
        d, [&] { return flashbox_attention_forward_ext(&x, &e); }, code, ms);
  };
  flashbox_attention_ext e = d.ext();
  e.document_ids_k = nullptr;
  refused(e, FLASHBOX_CPU, FLASHBOX_ERR_NULL_POINTER, {"document_ids_k is NULL"});
  std::vector<int32_t> prefix = {31, 0};
  e = d.ext(), e.prefix_lengths = prefix.data();
  refused(e, FLASHBOX_CPU, FLASHBOX_ERR_INVALID_ARGUMENT, {"prefix_lengths[0] = 31", "[0, 30]", "seqlen_k"});
  prefix = {0, -2};
  refused(e, FLASHBOX_CPU, FLASHBOX_ERR_INVALID_ARGUMENT, {"prefix_lengths[1] = -2"});
  e = d.ext(), e.document_ids_q = reinterpret_cast<const int32_t *>(d.lse().data());
  refused(e, FLASHBOX_CPU, FLASHBOX_ERR_INVALID_ARGUMENT, {"overlaps document_ids_q"});
  // The CUDA sm80 family takes both (tests/cuda/mask_sm80_test.cpp).
  flashbox_attention_args cuda = a;
  cuda.device = FLASHBOX_CUDA;
  e = d.ext(), e.prefix_lengths = nullptr;
  flashbox::test::expect_cuda_takes(
      d, [&] { return flashbox_attention_forward_ext(&cuda, &e); }, "document_ids");
  e = d.ext(), e.document_ids_q = e.document_ids_k = nullptr;
  flashbox::test::expect_cuda_takes(
      d, [&] { return flashbox_attention_forward_ext(&cuda, &e); }, "prefix_lengths");
}

TEST(MaskFamilyArgs, OlderStructSizeNeverReadsThem) {
  // A caller compiled before the mask families: struct_size ends at lse_partial, and the fields past
  // it are never read (here document ids that would empty every row).
  MaskCase c;
  c.seqlen_q = 33, c.seqlen_k = 33, c.causal = 1;
  MaskData d(c);
  ASSERT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
  const std::vector<uint8_t> expected = d.o_bytes();
  std::vector<int32_t> dq(size_t(2 * 33), 1), dk(size_t(2 * 33), 2);
  flashbox_attention_ext old = d.ext();
  old.struct_size = int32_t(offsetof(flashbox_attention_ext, document_ids_q));
  old.document_ids_q = dq.data(), old.document_ids_k = dk.data();
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &old), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(expected == d.o_bytes()) << "a struct_size before document_ids_q read it";
  old.struct_size = int32_t(sizeof old);
  a = d.forward_args(FLASHBOX_BLOCKED);
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &old), FLASHBOX_OK) << flashbox_last_error();
  for (float l : d.lse()) EXPECT_EQ(l, -INFINITY) << "different documents everywhere: every row keyless";
}

}  // namespace
