// flashbox_attention_kvcache on device = cuda with an fp8 e4m3 cache (the e4m3cache instantiations of
// the split kernel, decode_append_fp8.cu, the shared combine), against the fp64 reference on the
// dequantized cache (relative error < 1e-2, as the 16-bit cache's tests) and, for appends, byte for byte
// against the host's e4m3 rounding (core/float8.hpp): contiguous, indexed and paged caches (pages of
// 16 and 256), GQA 32/8, MQA and MHA, head dims 64/80/128/256, seqlen_q 1 and 4 with and without
// appends, split counts 1, 3 and the library's choice, lengths 0/1/17/1000/4097, per-tensor and
// per-(batch, kv head) descales (one of them 0), outliers in K, subnormal codes, saturating appends,
// sinks and the masking options. Skips without a GPU. Seeds are printed with every failure (FLASHBOX_TEST_SEED).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decode/kvcache_case.hpp"
#include "support/gpu_check.hpp"

namespace flashbox::test {
namespace {

// Runs the case on the GPU and checks o, lse and the cache; returns the kernel's name.
std::string run_cuda_fp8(KvCase c) {
#ifdef FLASHBOX_HAVE_CUDA
  c.device = FLASHBOX_CUDA;
  KvData d(c);
  d.to_device();
  EXPECT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << d.name();
  const std::string kernel = flashbox_last_kernel();
  EXPECT_NE(kernel.find("_e4m3cache_splits"), std::string::npos) << kernel << d.name();
  d.from_device();
  d.check();
  return kernel;
#else
  (void)c;
  return "";
#endif
}

KvCase fp8_case(CacheLayout layout, int64_t page_size, int64_t head_dim, int64_t heads_q, int64_t heads_kv) {
  KvCase c;
  c.fp8_cache = true, c.k_outliers = true, c.dtype = FLASHBOX_BFLOAT16;
  c.layout = layout, c.page_size = page_size, c.head_dim = head_dim, c.heads_q = heads_q, c.heads_kv = heads_kv;
  c.batch = 3, c.capacity = 333;
  return c;
}

class Fp8KvcacheCuda : public ::testing::TestWithParam<GpuCase> {};

TEST_P(Fp8KvcacheCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const GpuCase g = GetParam();
  for (int64_t seqlen_q : {1, 4})
    for (bool append : {false, true})
      for (int causal : {0, 1})
        for (int splits : {1, 3, 0})
          for (int descale : {1, 2}) {
            KvCase c = fp8_case(g.layout, g.page_size, g.head_dim, g.heads_q, g.heads_kv);
            c.seqlen_q = seqlen_q, c.seqlen_new = append ? seqlen_q : 0, c.causal = causal;
            c.num_splits = splits, c.descale = descale;
            run_cuda_fp8(c);
          }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Fp8KvcacheCuda,
    ::testing::Values(GpuCase{CacheLayout::Contiguous, 0, 128, 32, 8}, GpuCase{CacheLayout::Contiguous, 0, 64, 8, 1},
                      GpuCase{CacheLayout::Indexed, 0, 128, 8, 8}, GpuCase{CacheLayout::Paged, 16, 128, 32, 8},
                      GpuCase{CacheLayout::Paged, 256, 128, 32, 8}, GpuCase{CacheLayout::Paged, 16, 64, 16, 1},
                      GpuCase{CacheLayout::Paged, 16, 256, 8, 2}, GpuCase{CacheLayout::Contiguous, 0, 256, 4, 1},
                      // a head dim between the kernels' (zero-filled columns)
                      GpuCase{CacheLayout::Paged, 16, 80, 6, 2}),
    [](const auto &info) {
      const GpuCase &g = info.param;
      return std::string(layout_name(g.layout)) + std::to_string(g.page_size) + "_d" + std::to_string(g.head_dim) +
             "_h" + std::to_string(g.heads_q) + "_" + std::to_string(g.heads_kv);
    });

TEST(Fp8KvcacheCudaShapes, Lengths) {
  SKIP_WITHOUT_GPU();
  // Entries of 0, 1, 17, 1000 and 4097 cached keys, one appended or none, in every layout.
  for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Paged})
    for (int64_t page : {16, 256})
      for (int64_t seqlen_new : {0, 1})
        for (int splits : {1, 0}) {
          if (layout == CacheLayout::Contiguous && page != 16) continue;
          KvCase c = fp8_case(layout, page, 128, 32, 8);
          c.batch = 5, c.capacity = 4097 + 1, c.seqlen_new = seqlen_new, c.num_splits = splits, c.causal = 1;
          c.lengths = {0, 1, 17, 1000, 4097};
          run_cuda_fp8(c);
        }
}

TEST(Fp8KvcacheCudaShapes, LongCacheManySplits) {
  SKIP_WITHOUT_GPU();
  for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Paged}) {
    KvCase c = fp8_case(layout, 16, 128, 32, 8);
    c.batch = 1, c.capacity = 20000, c.seqlen_new = 1, c.causal = 1;
    run_cuda_fp8(c);  // the model chooses many splits for one sequence
    c.num_splits = 200;
    run_cuda_fp8(c);
  }
}

TEST(Fp8KvcacheCudaShapes, Fp16Queries) {
  SKIP_WITHOUT_GPU();
  for (int64_t d : {64, 128, 256})
    for (int splits : {1, 0}) {
      KvCase c = fp8_case(CacheLayout::Paged, 16, d, 8, 2);
      c.dtype = FLASHBOX_FLOAT16, c.seqlen_new = 1, c.num_splits = splits;
      run_cuda_fp8(c);
    }
}

TEST(Fp8KvcacheCudaShapes, DescalesNoneZeroAndSaturatingAppends) {
  SKIP_WITHOUT_GPU();
  // No descales (1.0: cache codes of values about 1), per-(batch, head) descales with one pair 0 (its
  // appended rows are written as 0), and new keys of +-4 over descales of about 1/200 (past 448: the
  // append saturates).
  KvCase none = fp8_case(CacheLayout::Paged, 16, 128, 32, 8);
  none.descale = 0, none.seqlen_new = 2, none.seqlen_q = 2;
  run_cuda_fp8(none);
  for (int splits : {1, 3}) {
    KvCase z = fp8_case(CacheLayout::Contiguous, 0, 128, 32, 8);
    z.zero_descale = true, z.seqlen_new = 4, z.seqlen_q = 4, z.num_splits = splits;
    run_cuda_fp8(z);
  }
}

TEST(Fp8KvcacheCudaShapes, SubnormalCodes) {
  SKIP_WITHOUT_GPU();
  // Every cached code subnormal (m * 2^-9, descales about 64): the exact conversion keeps them
  // (decode_fp8_convert.cuh); a flush to zero would leave K and V zero and o far from the reference.
  for (flashbox_dtype dt : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16})
    for (int descale : {1, 2}) {
      KvCase c = fp8_case(CacheLayout::Paged, 16, 128, 32, 8);
      c.dtype = dt, c.subnormal_codes = true, c.k_outliers = false, c.descale = descale;
      run_cuda_fp8(c);
    }
}

TEST(Fp8KvcacheCudaShapes, LearnableSinks) {
  SKIP_WITHOUT_GPU();
  // Entry 1 holds no key (short_len 0): without an append its rows see none (o = 0, lse = the sink).
  for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Paged})
    for (int64_t seqlen_q : {1, 4})
      for (bool append : {false, true})
        for (int splits : {1, 3, 0}) {
          KvCase c = fp8_case(layout, 16, 128, 32, 8);
          c.sink = true, c.short_len = 0, c.seqlen_q = seqlen_q, c.seqlen_new = append ? seqlen_q : 0;
          c.causal = 1, c.num_splits = splits;
          run_cuda_fp8(c);
        }
}

TEST(Fp8KvcacheCudaShapes, MaskingOptions) {
  SKIP_WITHOUT_GPU();
  KvCase base = fp8_case(CacheLayout::Paged, 16, 128, 8, 2);
  base.seqlen_q = 2, base.seqlen_new = 2, base.capacity = 400;
  for (int splits : {1, 4}) {
    base.num_splits = splits;
    for (const KvCase &c : masking_variants(
             base, {.causal_window_left = 100, .window_left = 37, .window_right = 5, .softcap = 5.f, .q_scale = 8.f}))
      run_cuda_fp8(c);
  }
}

TEST(Fp8KvcacheCudaShapes, ManyQueryRowsStayOnTheDecodeKernels) {
  SKIP_WITHOUT_GPU();
  // 64 new tokens x 4 query heads per KV head = 256 rows, where a 16-bit contiguous cache takes the
  // chunked-prefill route: an fp8 cache stays on the decode kernels (kvcache_prefill.hpp).
  KvCase c = fp8_case(CacheLayout::Contiguous, 0, 128, 8, 2);
  c.batch = 2, c.seqlen_q = 64, c.seqlen_new = 64, c.causal = 1, c.capacity = 300;
  run_cuda_fp8(c);
}

TEST(Fp8KvcacheCudaRefuses, HostDescalePointer) {
  SKIP_WITHOUT_GPU();
#ifdef FLASHBOX_HAVE_CUDA
  KvCase c = fp8_case(CacheLayout::Paged, 16, 128, 8, 2);
  c.device = FLASHBOX_CUDA, c.seqlen_new = 1;
  KvData d(c);
  d.to_device();
  d.args.k_descale = d.k_descale.data();  // host memory
  EXPECT_EQ(flashbox_attention_kvcache(&d.args), FLASHBOX_ERR_INVALID_ARGUMENT) << flashbox_last_error();
  EXPECT_NE(std::string(flashbox_last_error()).find("k_descale"), std::string::npos) << flashbox_last_error();
  const std::vector<uint8_t> k_before = d.k_cache, o_before = d.o;
  d.from_device();
  EXPECT_TRUE(d.k_cache == k_before) << "the cache was written by a refused call";
  EXPECT_TRUE(d.o == o_before) << "o was written by a refused call";
#endif
}

}  // namespace
}  // namespace flashbox::test
