// flashbox_attention_kvcache on device = cuda (the split-KV decode kernels): every cache layout against
// the fp64 reference on the gathered cache, shuffled page tables, lengths 1 and max, appends checked
// in the cache, explicit and chosen split counts, GQA/MQA/MHA, head dims 40..256, the masking options;
// bad tables refused with nothing written; learnable sinks through both the one-split finalisation and
// the combine, and through the chunked-prefill route. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decode/kvcache_case.hpp"
#include "support/gpu_check.hpp"

namespace flashbox::test {
namespace {

// Returns the rows that see no key when the case has sinks (KvData::check_keyless_rows), else 0.
int64_t run_cuda(KvCase c) {
#ifdef FLASHBOX_HAVE_CUDA
  c.device = FLASHBOX_CUDA;
  KvData d(c);
  d.to_device();
  EXPECT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << d.name();
  d.from_device();
  d.check();
  return c.sink ? d.check_keyless_rows() : 0;
#else
  (void)c;
  return 0;
#endif
}

class KvcacheCuda : public ::testing::TestWithParam<GpuCase> {};

TEST_P(KvcacheCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const GpuCase g = GetParam();
  for (int64_t seqlen_q : {1, 4})
    for (int64_t seqlen_new : {0, 1, 4})
      for (int causal : {0, 1})
        for (int splits : {0, 1, 3}) {
          if (seqlen_new > 0 && seqlen_new != seqlen_q) continue;  // decode appends the tokens it queries
          KvCase c;
          c.layout = g.layout, c.page_size = g.page_size, c.head_dim = g.head_dim;
          c.heads_q = g.heads_q, c.heads_kv = g.heads_kv;
          c.batch = 3, c.seqlen_q = seqlen_q, c.seqlen_new = seqlen_new, c.causal = causal;
          c.capacity = 333, c.num_splits = splits;
          run_cuda(c);
        }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, KvcacheCuda,
    ::testing::Values(GpuCase{CacheLayout::Contiguous, 0, 128, 8, 2}, GpuCase{CacheLayout::Contiguous, 0, 64, 4, 4},
                      GpuCase{CacheLayout::Indexed, 0, 128, 8, 1}, GpuCase{CacheLayout::Indexed, 0, 64, 8, 2},
                      GpuCase{CacheLayout::Paged, 16, 128, 8, 2}, GpuCase{CacheLayout::Paged, 16, 64, 12, 12},
                      GpuCase{CacheLayout::Paged, 48, 128, 4, 1}, GpuCase{CacheLayout::Paged, 256, 64, 8, 2},
                      // head dims between the kernels' (zero-filled columns) and the d256 kernel
                      GpuCase{CacheLayout::Contiguous, 0, 40, 6, 3}, GpuCase{CacheLayout::Paged, 16, 80, 6, 1},
                      GpuCase{CacheLayout::Contiguous, 0, 256, 4, 2}, GpuCase{CacheLayout::Paged, 256, 192, 6, 6}),
    [](const auto &info) {
      const GpuCase &g = info.param;
      return std::string(layout_name(g.layout)) + std::to_string(g.page_size) + "_d" + std::to_string(g.head_dim) +
             "_h" + std::to_string(g.heads_q) + "_" + std::to_string(g.heads_kv);
    });

TEST(KvcacheCudaShapes, ChunkedPrefillRunsTheForward) {
  // >= 256 query rows per KV head on a contiguous cache: one flash forward per batch entry on the
  // cache's rows (src/api/kvcache_prefill.hpp), against the fp64 reference like the decode path.
  SKIP_WITHOUT_GPU();
#ifdef FLASHBOX_HAVE_CUDA
  KvCase base;
  base.batch = 3, base.seqlen_q = 64, base.seqlen_new = 64, base.heads_q = 8, base.heads_kv = 2;
  base.head_dim = 128, base.capacity = 600, base.causal = 1;
  std::vector<KvCase> cases{base};
  KvCase c = base;
  c.causal = 0, c.head_dim = 64;
  cases.push_back(c);
  c = base;
  c.layout = CacheLayout::Indexed, c.leftpad = false;
  cases.push_back(c);
  c = base;
  c.leftpad = true, c.head_dim = 80;
  cases.push_back(c);
  c = base;
  c.has_window = 1, c.window_left = 100, c.window_right = 0, c.softcap = 5.f;
  cases.push_back(c);
  c = base;
  c.alibi = true, c.alibi_per_batch = true, c.seqlen_new = 0;
  cases.push_back(c);
  c = base;
  c.head_dim = 192, c.softcap = 4.f;  // above 128: the sm80 d256 forward, zero-filled columns
  cases.push_back(c);
  c = base;
  c.sink = true;  // the forward's learnable_sink
  cases.push_back(c);
  c.causal = 0, c.head_dim = 64, c.seqlen_new = 0;
  cases.push_back(c);
  for (KvCase k : cases) {
    k.device = FLASHBOX_CUDA;
    KvData d(k);
    d.to_device();
    ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
    EXPECT_NE(std::string(flashbox_last_kernel()).find("(kvcache prefill)"), std::string::npos)
        << flashbox_last_kernel() << d.name();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << d.name();
    d.from_device();
    d.check();
  }
#endif
}

TEST(KvcacheCudaShapes, LongCacheManySplits) {
  SKIP_WITHOUT_GPU();
  for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Paged}) {
    KvCase c;
    c.layout = layout, c.page_size = 16, c.batch = 1, c.heads_q = 32, c.heads_kv = 8, c.head_dim = 128;
    c.capacity = 20000, c.seqlen_new = 1, c.causal = 1;
    run_cuda(c);  // the model chooses many splits for one sequence
    c.num_splits = 200;
    run_cuda(c);
  }
}

// Learnable sinks: with one split the split kernel's finalisation folds the sink in, with more the
// combine does (a split's partial LSE must stay without it). Entry 1 holds no key (short_len 0), so
// without an append its rows see none: o = 0, lse = the sink, whichever kernel writes them.
TEST(KvcacheCudaShapes, LearnableSink) {
  SKIP_WITHOUT_GPU();
  const GpuCase shapes[] = {{CacheLayout::Contiguous, 0, 128, 8, 2}, {CacheLayout::Paged, 16, 64, 8, 1},
                            {CacheLayout::Indexed, 0, 128, 8, 8}, {CacheLayout::Paged, 256, 256, 4, 2}};
  for (const GpuCase &g : shapes)
    for (int64_t seqlen_q : {1, 4})
      for (bool append : {false, true})
        for (int causal : {0, 1})
          for (int splits : {1, 3, 0}) {
            KvCase c;
            c.layout = g.layout, c.page_size = g.page_size, c.head_dim = g.head_dim;
            c.heads_q = g.heads_q, c.heads_kv = g.heads_kv, c.sink = true, c.short_len = 0;
            c.batch = 3, c.seqlen_q = seqlen_q, c.seqlen_new = append ? seqlen_q : 0, c.causal = causal;
            c.capacity = 333, c.num_splits = splits;
            const int64_t keyless = run_cuda(c);
            if (!append) EXPECT_GE(keyless, c.heads_q * seqlen_q);
          }
  for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Paged}) {
    KvCase c;  // many splits, most of entry 1's empty
    c.layout = layout, c.page_size = 16, c.batch = 2, c.heads_q = 32, c.heads_kv = 8, c.head_dim = 128;
    c.capacity = 6000, c.seqlen_new = 1, c.causal = 1, c.sink = true;
    run_cuda(c);
    c.num_splits = 64;
    run_cuda(c);
  }
  KvCase base;  // with the masking options
  base.layout = CacheLayout::Paged, base.batch = 3, base.seqlen_q = 2, base.seqlen_new = 2, base.sink = true;
  base.heads_q = 8, base.heads_kv = 2, base.head_dim = 128, base.capacity = 400;
  for (int splits : {1, 4}) {
    base.num_splits = splits;
    for (const KvCase &c : masking_variants(
             base, {.causal_window_left = 100, .window_left = 37, .window_right = 5, .softcap = 5.f, .q_scale = 8.f}))
      run_cuda(c);
  }
}

TEST(KvcacheCudaShapes, MoreRowsThanOneTile) {
  SKIP_WITHOUT_GPU();
  // 8 query tokens x 4 heads per group = 32 rows: two row tiles per KV head; causal inside the tile.
  KvCase c;
  c.layout = CacheLayout::Paged, c.page_size = 32, c.batch = 2, c.seqlen_q = 8, c.seqlen_new = 8;
  c.heads_q = 16, c.heads_kv = 4, c.head_dim = 128, c.capacity = 500, c.causal = 1;
  run_cuda(c);
  c.causal = 0, c.num_splits = 5;
  run_cuda(c);
}

TEST(KvcacheCudaShapes, Fp16AndFixedLengths) {
  SKIP_WITHOUT_GPU();
  KvCase c;
  c.dtype = FLASHBOX_FLOAT16, c.layout = CacheLayout::Paged, c.batch = 4, c.fixed_len = true, c.capacity = 256;
  c.head_dim = 64, c.heads_q = 8, c.heads_kv = 2, c.seqlen_new = 1;
  run_cuda(c);
}

TEST(KvcacheCudaShapes, MaskingOptions) {
  SKIP_WITHOUT_GPU();
  KvCase base;
  base.layout = CacheLayout::Paged, base.batch = 3, base.seqlen_q = 2, base.seqlen_new = 2;
  base.heads_q = 8, base.heads_kv = 2, base.head_dim = 128, base.capacity = 400;
  for (int splits : {0, 1, 4}) {
    base.num_splits = splits;
    for (const KvCase &c : masking_variants(
             base, {.causal_window_left = 100, .window_left = 37, .window_right = 5, .softcap = 5.f, .q_scale = 8.f}))
      run_cuda(c);
    KvCase sq = base;
    sq.seqlen_q = 4, sq.seqlen_new = 0, sq.short_len = 1, sq.causal = 1;  // rows that see no key
    run_cuda(sq);
  }
}

TEST(KvcacheCudaShapes, Rotary) {
  SKIP_WITHOUT_GPU();
  for (int64_t d : {64, 128})
    for (int interleaved : {0, 1})
      for (int causal : {0, 1}) {
        KvCase c;
        c.layout = causal ? CacheLayout::Paged : CacheLayout::Contiguous, c.leftpad = !causal;
        c.batch = 3, c.seqlen_q = 2, c.seqlen_new = 2, c.heads_q = 8, c.heads_kv = 2, c.head_dim = d;
        c.capacity = 200, c.causal = causal, c.rotary_dim = d == 64 ? 64 : 32, c.rotary_interleaved = interleaved;
        run_cuda(c);
      }
}

TEST(KvcacheCudaRefuses, BadTablesWriteNothing) {
  SKIP_WITHOUT_GPU();
#ifdef FLASHBOX_HAVE_CUDA
  struct Bad {
    const char *what;
    int code;
    void (*mutate)(KvData &);
  };
  const Bad bad[] = {
      {"page out of range", FLASHBOX_ERR_INVALID_ARGUMENT, [](KvData &x) { x.table[1] = int32_t(x.entries); }},
      {"negative page", FLASHBOX_ERR_INVALID_ARGUMENT, [](KvData &x) { x.table[0] = -3; }},
      {"negative length", FLASHBOX_ERR_INVALID_SIZE, [](KvData &x) { x.seqlens[1] = -1; }},
      {"length > capacity", FLASHBOX_ERR_INVALID_SIZE, [](KvData &x) { x.seqlens[0] += 1; }},
  };
  for (const Bad &b : bad) {
    SCOPED_TRACE(b.what);
    KvCase c;
    c.device = FLASHBOX_CUDA, c.layout = CacheLayout::Paged, c.batch = 2, c.capacity = 96, c.seqlen_new = 1;
    c.head_dim = 64;
    KvData d(c);
    b.mutate(d);
    const auto o0 = d.o, k0 = d.k_cache, v0 = d.v_cache;
    d.to_device();
    EXPECT_EQ(flashbox_attention_kvcache(&d.args), b.code) << flashbox_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    d.from_device();
    EXPECT_TRUE(d.o == o0) << "o written by a refused call";
    EXPECT_TRUE(d.k_cache == k0 && d.v_cache == v0) << "cache written by a refused call";
  }
#endif
}

TEST(KvcacheCudaRefuses, HostSinkPointer) {
  SKIP_WITHOUT_GPU();
#ifdef FLASHBOX_HAVE_CUDA
  KvCase c;
  c.device = FLASHBOX_CUDA, c.layout = CacheLayout::Paged, c.batch = 2, c.capacity = 96, c.head_dim = 64, c.sink = true;
  KvData d(c);
  d.to_device();
  d.args.learnable_sink = d.sink.data();  // host memory: the values live on the call's device
  EXPECT_EQ(flashbox_attention_kvcache(&d.args), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("learnable_sink"), std::string::npos) << flashbox_last_error();
#endif
}

TEST(KvcacheCudaRefuses, TrustedBadTableStaysInsideTheCache) {
  SKIP_WITHOUT_GPU();
#ifdef FLASHBOX_HAVE_CUDA
  // With tables_trusted the call is not refused, but no copy leaves the cache (compute-sanitizer runs
  // this test): the bad page's keys read as zeros and the append into it is dropped.
  KvCase c;
  c.device = FLASHBOX_CUDA, c.layout = CacheLayout::Paged, c.batch = 2, c.capacity = 96, c.seqlen_new = 1;
  c.head_dim = 128;
  KvData d(c);
  d.table[0] = 1 << 28;
  d.table[size_t(d.pages_per_seq * 1)] = -7;
  d.args.tables_trusted = 1;
  d.to_device();
  EXPECT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
#endif
}

TEST(KvcacheCudaShapes, ChosenSplitsFollowTheModel) {
  SKIP_WITHOUT_GPU();
#ifdef FLASHBOX_HAVE_CUDA
  // Few CTAs (batch 1, 8 KV heads) over a long cache: split; many CTAs over a short cache: not split.
  KvCase c;
  c.device = FLASHBOX_CUDA, c.batch = 1, c.heads_q = 32, c.heads_kv = 8, c.head_dim = 128, c.capacity = 32768;
  KvData d(c);
  d.to_device();
  const int long_splits = flashbox_kvcache_num_splits(&d.args);
  EXPECT_GT(long_splits, 4) << flashbox_last_error();
  KvCase s = c;
  s.batch = 64, s.capacity = 256;
  KvData d2(s);
  d2.to_device();
  EXPECT_EQ(flashbox_kvcache_num_splits(&d2.args), 1) << flashbox_last_error();
#endif
}

}  // namespace
}  // namespace flashbox::test
