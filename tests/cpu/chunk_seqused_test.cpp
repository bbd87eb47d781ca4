// flashbox_attention_ext's attention_chunk (Llama 4's chunked local attention) and seqused_q /
// seqused_k (FlashAttention-3's used lengths) on the CPU levels (naive and blocked, forward and
// backward) against the fp64 reference on fresh random inputs (seed printed; the chunk's bounds are
// checked element by element against FlashAttention-3's definition in masks_test.cpp); rows past
// seqused_q left as they were by the forward, their gradients 0; bad values and CUDA refused with
// nothing written.
#include <gtest/gtest.h>

#include <cstddef>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/mask_case.hpp"
#include "support/sanitizer_build.hpp"

using flashbox::test::MaskCase;
using flashbox::test::MaskData;
using flashbox::test::check_cpu_levels;

namespace {

TEST(AttentionChunk, ForwardBackward) {
  // Chunks smaller and larger than the blocked levels' 64-row tiles, rows whose chunk starts before
  // key 0 (seqlen_q > seqlen_k), with causal, windows, GQA. The sanitizer build
  // (support/sanitizer_build.hpp) takes one causal setting per (chunk, shape), alternating: each chunk
  // and each shape still meets both.
  const int64_t chunks[] = {1, 7, 16, 64, 100};
  const int64_t shapes[][2] = {{70, 70}, {45, 130}, {130, 45}, {1, 33}, {65, 65}};
  for (size_t ci = 0; ci < std::size(chunks); ++ci)
    for (size_t si = 0; si < std::size(shapes); ++si)
      for (int causal : {0, 1}) {
        if (flashbox::test::kSanitizerBuild && causal != int((ci + si) % 2)) continue;
        const int64_t chunk = chunks[ci];
        const auto &s = shapes[si];
        MaskCase c;
        c.seqlen_q = s[0], c.seqlen_k = s[1], c.attention_chunk = chunk, c.causal = causal;
        c.heads_q = 4, c.heads_kv = 2;
        check_cpu_levels(c);
      }
}

TEST(AttentionChunk, WithWindowSoftcapAlibiBf16) {
  MaskCase c;
  c.seqlen_q = 150, c.seqlen_k = 150, c.heads_q = 4, c.heads_kv = 1, c.head_dim = 40, c.attention_chunk = 48;
  c.window_left = 20, c.causal = 1, c.softcap = 3.0f, c.alibi = 1, c.dtype = FLASHBOX_BFLOAT16;
  check_cpu_levels(c);
  c.causal = 0, c.window_left = -1, c.window_right = 9, c.alibi = 0, c.seed = flashbox::test::fresh_seed();
  check_cpu_levels(c);
}

TEST(Seqused, FixedLengthBatch) {
  // seqused_q and seqused_k alone and together, with entries of 0, 1 and the full length: the rows
  // used are computed with their own alignment (shift = used_k - used_q).
  for (int which = 0; which < 3; ++which)
    for (int causal : {0, 1}) {
      MaskCase c;
      c.batch = 4, c.seqlen_q = 65, c.seqlen_k = 80, c.heads_q = 4, c.heads_kv = 2, c.causal = causal;
      if (which != 1) c.used_q = {65, 0, 17, 1};
      if (which != 0) c.used_k = {3, 80, 0, 63};
      c.seed = flashbox::test::fresh_seed();
      check_cpu_levels(c);
    }
}

TEST(Seqused, WithVariableLengthsAndChunk) {
  MaskCase c;
  c.lens_q = {17, 0, 80, 5, 64};
  c.lens_k = {20, 9, 100, 1, 64};
  c.used_q = {10, 0, 80, 5, 1};
  c.used_k = {20, 3, 41, 0, 64};
  c.heads_q = 3, c.heads_kv = 1, c.head_dim = 24;
  for (int causal : {0, 1}) {
    c.causal = causal, c.attention_chunk = causal ? 16 : 0, c.seed = flashbox::test::fresh_seed();
    check_cpu_levels(c);
  }
  c.dtype = FLASHBOX_BFLOAT16, c.window_left = 12, c.seed = flashbox::test::fresh_seed();
  check_cpu_levels(c);
}

TEST(Seqused, FullLengthsAreTheFixedLengthAnswer) {
  // seqused equal to the lengths: the same bytes as without it (same data, same level).
  MaskCase c;
  c.batch = 3, c.seqlen_q = 48, c.seqlen_k = 70, c.causal = 1;
  MaskData plain(c);
  c.used_q = {48, 48, 48}, c.used_k = {70, 70, 70};
  MaskData used(c);
  for (flashbox_impl impl : {FLASHBOX_NAIVE, FLASHBOX_BLOCKED}) {
    ASSERT_EQ(plain.forward(impl), FLASHBOX_OK) << flashbox_last_error();
    ASSERT_EQ(used.forward(impl), FLASHBOX_OK) << flashbox_last_error();
    EXPECT_TRUE(plain.o_bytes() == used.o_bytes()) << flashbox_impl_name(impl);
    EXPECT_TRUE(plain.lse() == used.lse()) << flashbox_impl_name(impl);
    EXPECT_EQ(std::string(flashbox_last_kernel()).find("_seqused"), std::string(flashbox_last_kernel()).size() - 8);
  }
}

// A refusal: the code, every phrase in the message, no output written.
void expect_refused(MaskData &d, const flashbox_attention_args &a, const flashbox_attention_ext &e, int code,
                    const std::vector<std::string> &mentions) {
  flashbox::test::expect_call_refused(
      d, [&] { return flashbox_attention_forward_ext(&a, &e); }, code, mentions);
}

TEST(ChunkSequsedArgs, BadValuesAreNamed) {
  MaskCase c;
  c.batch = 2, c.seqlen_q = 17, c.seqlen_k = 30;
  MaskData d(c);
  const flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  {
    SCOPED_TRACE("negative chunk");
    flashbox_attention_ext e = d.ext();
    e.attention_chunk = -4;
    expect_refused(d, a, e, FLASHBOX_ERR_INVALID_ARGUMENT, {"attention_chunk = -4", ">= 0"});
  }
  std::vector<int32_t> used = {17, 18};
  {
    SCOPED_TRACE("seqused_q past seqlen_q");
    flashbox_attention_ext e = d.ext();
    e.seqused_q = used.data();
    expect_refused(d, a, e, FLASHBOX_ERR_INVALID_ARGUMENT, {"seqused_q[1] = 18", "[0, 17]", "seqlen_q"});
  }
  {
    SCOPED_TRACE("negative seqused_k");
    used = {-1, 3};
    flashbox_attention_ext e = d.ext();
    e.seqused_k = used.data();
    expect_refused(d, a, e, FLASHBOX_ERR_INVALID_ARGUMENT, {"seqused_k[0] = -1", "[0, 30]"});
  }
  {
    SCOPED_TRACE("seqused inside an output");
    flashbox_attention_ext e = d.ext();
    e.seqused_k = reinterpret_cast<const int32_t *>(d.lse().data());
    expect_refused(d, a, e, FLASHBOX_ERR_INVALID_ARGUMENT, {"overlaps seqused_k"});
  }
  {
    SCOPED_TRACE("seqused past a varlen span");
    MaskCase v;
    v.lens_q = {4, 6}, v.lens_k = {5, 2}, v.used_k = {5, 3};
    MaskData dv(v);
    expect_refused(dv, dv.forward_args(FLASHBOX_NAIVE), dv.ext(), FLASHBOX_ERR_INVALID_ARGUMENT,
                   {"seqused_k[1] = 3", "[0, 2]", "sequence 1 in cu_seqlens_k"});
  }
}

TEST(ChunkSequsedArgs, CudaTakesThem) {
  // The CUDA sm80 family takes both: never refused as cpu-only fields, whether or not this build has
  // CUDA or a GPU (tests/cuda/mask_sm80_test.cpp runs them on the GPU).
  MaskCase c;
  c.batch = 2, c.seqlen_q = 17, c.seqlen_k = 17, c.dtype = FLASHBOX_BFLOAT16;
  MaskData d(c);
  std::vector<int32_t> used = {17, 9};
  flashbox_attention_args a = d.forward_args(FLASHBOX_AUTO);
  a.device = FLASHBOX_CUDA;
  flashbox_attention_ext chunk = d.ext();
  chunk.attention_chunk = 8;
  flashbox_attention_ext uq = d.ext();
  uq.seqused_q = used.data();
  flashbox_attention_ext uk = d.ext();
  uk.seqused_k = used.data();
  const std::pair<const flashbox_attention_ext *, const char *> fields[] = {{&chunk, "attention_chunk"},
                                                                            {&uq, "seqused_q"},
                                                                            {&uk, "seqused_k"}};
  for (const auto &field : fields) {
    const flashbox_attention_ext *e = field.first;  // a plain variable: clang 14 lambdas cannot capture a structured binding
    flashbox::test::expect_cuda_takes(
        d, [&] { return flashbox_attention_forward_ext(&a, e); }, field.second);
  }
}

TEST(ChunkSequsedArgs, StructWithoutTheFieldsReadsThemAsZero) {
  // A caller compiled with head_dim_v but before attention_chunk: struct_size ends there, and the
  // bytes after it are never read (here a chunk of 1 that would change every row).
  MaskCase c;
  c.seqlen_q = 33, c.seqlen_k = 33, c.window_left = 5;
  MaskData d(c);
  ASSERT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
  const std::vector<uint8_t> expected = d.o_bytes();
  flashbox_attention_ext old = d.ext();
  old.struct_size = int32_t(offsetof(flashbox_attention_ext, attention_chunk));
  old.attention_chunk = 1;
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &old), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(expected == d.o_bytes()) << "a struct_size before attention_chunk did not read it as 0";
  old.struct_size = int32_t(offsetof(flashbox_attention_ext, attention_chunk) + 4);
  const std::vector<uint8_t> before = d.outputs_snapshot();
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &old), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("ends inside a field"), std::string::npos) << flashbox_last_error();
  EXPECT_TRUE(before == d.outputs_snapshot());
}

}  // namespace
