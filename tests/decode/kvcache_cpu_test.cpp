// flashbox_attention_kvcache on device = cpu (runs in CI): every cache layout against the fp64
// reference on the gathered cache, appends checked in the cache, lengths of 1 and of the capacity,
// the masking options; and the argument and table checks, each refused with its code, its message and
// nothing written.
#include <gtest/gtest.h>

#include <cstddef>
#include <limits>
#include <ostream>
#include <string>

#include "decode/kvcache_case.hpp"

namespace flashbox::test {
namespace {

struct LayoutCase {
  CacheLayout layout;
  int64_t page_size;
};

void PrintTo(const LayoutCase &l, std::ostream *os) { *os << layout_name(l.layout) << " page " << l.page_size; }

class KvcacheCpuLayouts : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(KvcacheCpuLayouts, MatchesReference) {
  const LayoutCase lc = GetParam();
  for (flashbox_dtype dt : {FLASHBOX_FLOAT32, FLASHBOX_BFLOAT16})
    for (int64_t seqlen_new : {0, 3})
      for (int causal : {0, 1}) {
        KvCase c;
        c.layout = lc.layout, c.page_size = lc.page_size, c.dtype = dt;
        c.batch = 3, c.seqlen_q = 2, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 32, c.capacity = 90;
        c.seqlen_new = seqlen_new, c.causal = causal;
        run_cpu(c);
      }
}

INSTANTIATE_TEST_SUITE_P(Layouts, KvcacheCpuLayouts,
                         ::testing::Values(LayoutCase{CacheLayout::Contiguous, 0}, LayoutCase{CacheLayout::Indexed, 0},
                                           LayoutCase{CacheLayout::Paged, 16}, LayoutCase{CacheLayout::Paged, 48}),
                         [](const auto &info) {
                           return std::string(layout_name(info.param.layout)) + std::to_string(info.param.page_size);
                         });

TEST(KvcacheCpu, MaskingOptions) {
  KvCase base;
  base.dtype = FLASHBOX_FLOAT32, base.layout = CacheLayout::Paged, base.batch = 2, base.seqlen_q = 3;
  base.heads_q = 6, base.heads_kv = 2, base.head_dim = 16, base.capacity = 70, base.seqlen_new = 2;
  for (const KvCase &c :
       masking_variants(base,
                        {.causal_window_left = 5, .window_left = 7, .window_right = 3, .softcap = 3.f, .q_scale = 6.f}))
    run_cpu(c);
}

TEST(KvcacheCpu, Rotary) {
  for (int interleaved : {0, 1})
    for (int causal : {0, 1})
      for (bool leftpad : {false, true}) {
        KvCase c;
        c.dtype = FLASHBOX_BFLOAT16, c.layout = leftpad ? CacheLayout::Contiguous : CacheLayout::Paged;
        c.batch = 2, c.seqlen_q = 3, c.seqlen_new = 3, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 32;
        c.capacity = 64, c.causal = causal, c.leftpad = leftpad;
        c.rotary_dim = 16, c.rotary_interleaved = interleaved;
        run_cpu(c);
      }
}

TEST(KvcacheCpu, SeqlenQLargerThanCacheSeesNothingForEarlyRows) {
  KvCase c;
  c.dtype = FLASHBOX_FLOAT32, c.batch = 2, c.seqlen_q = 4, c.heads_q = 2, c.heads_kv = 1, c.head_dim = 8;
  c.capacity = 40, c.short_len = 1, c.causal = 1;
  KvData d(c);
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error();
  d.check();
  // Entry 1 holds one key: queries 0..2 sit before it (o = 0, lse = -inf), query 3 sees it.
  EXPECT_TRUE(std::isinf(d.lse[size_t((1 * 2 + 0) * 4 + 0)]));
  EXPECT_TRUE(std::isfinite(d.lse[size_t((1 * 2 + 0) * 4 + 3)]));
}

// Learnable sinks (one logit per query head in every row's denominator) on each cache layout, MQA
// and GQA, one and four query tokens, appends, causal and not, entry 1 with no cached key (its rows
// see no key without an append: o = 0, lse = the sink); the split count does not change the CPU's
// result, so 1 and 3 must both match.
TEST(KvcacheCpu, LearnableSink) {
  for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Paged})
    for (flashbox_dtype dt : {FLASHBOX_FLOAT32, FLASHBOX_BFLOAT16})
      for (int64_t seqlen_q : {1, 4})
        for (bool append : {false, true})
          for (int causal : {0, 1})
            for (int splits : {1, 3}) {
              KvCase c;
              c.layout = layout, c.page_size = 16, c.dtype = dt, c.sink = true;
              c.batch = 3, c.seqlen_q = seqlen_q, c.heads_q = 8, c.heads_kv = seqlen_q == 1 ? 1 : 2, c.head_dim = 32;
              c.capacity = 90, c.short_len = 0, c.seqlen_new = append ? seqlen_q : 0;
              c.causal = causal, c.num_splits = splits;
              KvData d(c);
              ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
              EXPECT_STREQ(flashbox_last_kernel(), "cpu_kvcache_rowwise");
              d.check();
              if (!append) EXPECT_GE(d.check_keyless_rows(), c.heads_q * seqlen_q) << d.name();
            }
}

TEST(KvcacheCpu, LearnableSinkWithMasks) {
  KvCase base;
  base.dtype = FLASHBOX_FLOAT32, base.layout = CacheLayout::Paged, base.batch = 2, base.seqlen_q = 3;
  base.heads_q = 6, base.heads_kv = 2, base.head_dim = 16, base.capacity = 70, base.seqlen_new = 2;
  base.sink = true;
  for (const KvCase &c :
       masking_variants(base,
                        {.causal_window_left = 5, .window_left = 7, .window_right = 3, .softcap = 3.f, .q_scale = 6.f}))
    run_cpu(c);
}

// ---- refusals: code, message, nothing written ---------------------------------------------------

KvCase small_paged() {
  KvCase c;
  c.dtype = FLASHBOX_BFLOAT16, c.layout = CacheLayout::Paged, c.page_size = 16, c.batch = 3, c.capacity = 64;
  c.seqlen_new = 2, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 16;
  return c;
}

TEST(KvcacheCpuRefuses, PageIndexOutOfRange) {
  KvData d(small_paged());
  expect_refused(d, FLASHBOX_ERR_INVALID_ARGUMENT,
                 "block_table[1][0] = ", [](KvData &x) { x.table[size_t(1 * x.pages_per_seq)] = int32_t(x.entries); });
  KvData d2(small_paged());
  expect_refused(d2, FLASHBOX_ERR_INVALID_ARGUMENT, "is out of range", [](KvData &x) { x.table[0] = -1; });
}

TEST(KvcacheCpuRefuses, NegativeLength) {
  KvData d(small_paged());
  expect_refused(d, FLASHBOX_ERR_INVALID_SIZE, "cache_seqlens[2] = -5 must be >= 0",
                 [](KvData &x) { x.seqlens[2] = -5; });
}

TEST(KvcacheCpuRefuses, LengthBeyondCapacity) {
  KvData d(small_paged());
  expect_refused(d, FLASHBOX_ERR_INVALID_SIZE, "exceeds the cache's capacity of 64 keys",
                 [](KvData &x) { x.seqlens[1] = 63; });  // 63 + 2 new > 64
  KvCase c = small_paged();
  c.layout = CacheLayout::Contiguous;
  KvData d2(c);
  expect_refused(d2, FLASHBOX_ERR_INVALID_SIZE, "cache_rows = 64", [](KvData &x) { x.seqlens[0] = 70; });
}

TEST(KvcacheCpuRefuses, BatchIndexOutOfRangeOrRepeated) {
  KvCase c = small_paged();
  c.layout = CacheLayout::Indexed;
  KvData d(c);
  expect_refused(d, FLASHBOX_ERR_INVALID_ARGUMENT, "cache_batch_idx[1] = 99 is out of range",
                 [](KvData &x) { x.batch_idx[1] = 99; });
  KvData d2(c);
  expect_refused(d2, FLASHBOX_ERR_INVALID_ARGUMENT, "repeats an earlier entry",
                 [](KvData &x) { x.batch_idx[2] = x.batch_idx[0]; });
}

TEST(KvcacheCpuRefuses, LeftpadBeyondLength) {
  KvCase c = small_paged();
  c.leftpad = true;
  KvData d(c);
  expect_refused(d, FLASHBOX_ERR_INVALID_ARGUMENT, "cache_leftpad[0]",
                 [](KvData &x) { x.leftpad[0] = x.seqlens[0] + 1; });
}

TEST(KvcacheCpuRefuses, Arguments) {
  struct Bad {
    const char *what;
    int code;
    const char *needle;
    void (*mutate)(KvData &);
  };
  const Bad bad[] = {
      {"struct_size", FLASHBOX_ERR_INVALID_ARGUMENT, "struct_size = 8", [](KvData &x) { x.args.struct_size = 8; }},
      {"no seqlens", FLASHBOX_ERR_NULL_POINTER, "cache_seqlens is NULL",
       [](KvData &x) { x.args.cache_seqlens = nullptr; }},
      {"k_new only", FLASHBOX_ERR_NULL_POINTER, "v_new is NULL", [](KvData &x) { x.args.v_new = nullptr; }},
      {"page size", FLASHBOX_ERR_INVALID_SIZE, "multiple of 16", [](KvData &x) { x.args.cache_rows = 24; }},
      {"paged + batch_idx", FLASHBOX_ERR_INVALID_ARGUMENT, "cache_batch_idx is given with a paged cache",
       [](KvData &x) { x.args.cache_batch_idx = x.seqlens.data(); }},
      {"table stride", FLASHBOX_ERR_BAD_STRIDE, "block_table_stride", [](KvData &x) { x.args.block_table_stride = 1; }},
      {"heads", FLASHBOX_ERR_HEADS_MISMATCH, "heads_q = 4 is not a multiple of heads_kv = 3",
       [](KvData &x) { x.args.heads_kv = 3; }},
      {"num_splits", FLASHBOX_ERR_INVALID_ARGUMENT, "num_splits = -1", [](KvData &x) { x.args.num_splits = -1; }},
      {"softcap", FLASHBOX_ERR_INVALID_ARGUMENT, "softcap", [](KvData &x) { x.args.softcap = -1.f; }},
      {"window", FLASHBOX_ERR_INVALID_ARGUMENT, "window_left = -2",
       [](KvData &x) { x.args.has_window = 1, x.args.window_left = -2; }},
      {"rotary half", FLASHBOX_ERR_NULL_POINTER, "rotary_sin is NULL",
       [](KvData &x) { x.args.rotary_cos = x.q.data(); }},
      {"rotary dim", FLASHBOX_ERR_INVALID_SIZE, "rotary_dim = 3",
       [](KvData &x) { x.args.rotary_cos = x.args.rotary_sin = x.q.data(), x.args.rotary_dim = 3; }},
      {"o aliases q", FLASHBOX_ERR_INVALID_ARGUMENT, "overlaps", [](KvData &x) { x.args.o = x.q.data(); }},
      {"cache aliases k_new", FLASHBOX_ERR_INVALID_ARGUMENT, "overlaps",
       [](KvData &x) { x.args.k_new = x.args.k_cache; }},
      {"cuda fp32", FLASHBOX_ERR_UNSUPPORTED_DTYPE, "fp32",
       [](KvData &x) { x.args.device = FLASHBOX_CUDA, x.args.dtype = FLASHBOX_FLOAT32; }},
      {"cuda head_dim", FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim = 12",
       [](KvData &x) { x.args.device = FLASHBOX_CUDA, x.args.head_dim = 12; }},
      {"alibi stride without slopes", FLASHBOX_ERR_INVALID_ARGUMENT, "alibi_batch_stride = 4",
       [](KvData &x) { x.args.alibi_batch_stride = 4; }},
      {"alibi stride below heads", FLASHBOX_ERR_INVALID_ARGUMENT, "alibi_batch_stride = 1",
       [](KvData &x) {
         x.args.alibi_slopes = reinterpret_cast<const float *>(x.q.data()), x.args.alibi_batch_stride = 1;
       }},
      {"struct_size", FLASHBOX_ERR_INVALID_ARGUMENT, "struct_size = 12", [](KvData &x) { x.args.struct_size = 12; }},
  };
  for (const Bad &b : bad) {
    SCOPED_TRACE(b.what);
    KvData d(small_paged());
    expect_refused(d, b.code, b.needle, b.mutate);
  }
  EXPECT_EQ(flashbox_attention_kvcache(nullptr), FLASHBOX_ERR_NULL_POINTER);
}

TEST(KvcacheCpuRefuses, NonFiniteOrMisalignedSink) {
  KvCase c = small_paged();
  c.sink = true;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    KvData d(c);
    expect_refused(d, FLASHBOX_ERR_INVALID_ARGUMENT, "learnable_sink[3] = ", [bad](KvData &x) { x.sink[3] = bad; });
    EXPECT_NE(std::string(flashbox_last_error()).find("must be finite"), std::string::npos) << flashbox_last_error();
  }
  KvData d(c);
  expect_refused(d, FLASHBOX_ERR_MISALIGNED, "learnable_sink = ", [](KvData &x) {
    x.args.learnable_sink = reinterpret_cast<const float *>(reinterpret_cast<const char *>(x.sink.data()) + 2);
  });
}

TEST(KvcacheCpu, ChunkedPrefillRunsTheForward) {
  // 64 new tokens x 4 query heads per KV head = 256 rows per KV head (>= kPrefillRows): the call
  // runs as one forward per batch entry on the cache's rows (src/api/kvcache_prefill.hpp), and its
  // output, LSE and appended cache match the fp64 reference like the decode path's.
  KvCase base;
  base.dtype = FLASHBOX_BFLOAT16, base.batch = 3, base.seqlen_q = 64, base.seqlen_new = 64;
  base.heads_q = 8, base.heads_kv = 2, base.head_dim = 32, base.capacity = 300, base.causal = 1;
  std::vector<KvCase> cases;
  cases.push_back(base);
  KvCase c = base;
  c.causal = 0;
  cases.push_back(c);
  c = base;
  c.layout = CacheLayout::Indexed;
  cases.push_back(c);
  c = base;
  c.leftpad = true;
  cases.push_back(c);
  c = base;
  c.has_window = 1, c.window_left = 40, c.window_right = 0;
  cases.push_back(c);
  c = base;
  c.causal = 0, c.has_window = 1, c.window_left = 30, c.window_right = 7;
  cases.push_back(c);
  c = base;
  c.softcap = 3.f, c.q_scale = 6.f;
  cases.push_back(c);
  c = base;
  c.alibi = true, c.alibi_per_batch = true;
  cases.push_back(c);
  c = base;
  c.seqlen_new = 0;  // a chunk of queries against what is cached
  cases.push_back(c);
  c = base;
  c.sink = true;  // through the forward's learnable_sink
  cases.push_back(c);
  c.causal = 0, c.alibi = true;
  cases.push_back(c);
  for (const KvCase &k : cases) {
    KvData d(k);
    ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
    EXPECT_NE(std::string(flashbox_last_kernel()).find("(kvcache prefill)"), std::string::npos)
        << flashbox_last_kernel() << d.name();
    d.check();
  }
  // Paged caches stay on the decode path.
  KvCase paged = base;
  paged.layout = CacheLayout::Paged, paged.page_size = 16;
  KvData d(paged);
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_kvcache_rowwise");
  d.check();
}

TEST(KvcacheCpu, FirstVersionOfTheStructStillWorks) {
  // A caller compiled against the struct without alibi_batch_stride passes its smaller struct_size:
  // the call is the same as with the field at 0.
  KvData d(small_paged());
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error();
  const std::vector<uint8_t> o_full = d.o;
  d.o.assign(d.o.size(), 0xff);
  d.args.struct_size = int32_t(offsetof(flashbox_kvcache_args, alibi_batch_stride));
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error();
  EXPECT_TRUE(d.o == o_full);
}

TEST(KvcacheCpu, OlderStructSizesNeverReadTheSink) {
  // A caller compiled against the struct before learnable_sink (or before alibi_batch_stride) has
  // whatever follows its struct in memory where the field would be: the library reads it as NULL.
  KvData d(small_paged());
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error();
  const std::vector<uint8_t> o_full = d.o;
  const std::vector<float> lse_full = d.lse, poison(size_t(d.c.heads_q), std::numeric_limits<float>::quiet_NaN());
  for (size_t size : {offsetof(flashbox_kvcache_args, learnable_sink), offsetof(flashbox_kvcache_args, alibi_batch_stride)}) {
    d.o.assign(d.o.size(), 0xff);
    d.lse.assign(d.lse.size(), std::numeric_limits<float>::quiet_NaN());
    d.args.struct_size = int32_t(size);
    d.args.learnable_sink = poison.data();  // refused as non-finite were it read
    ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << " struct_size " << size;
    EXPECT_TRUE(d.o == o_full) << "struct_size " << size;
    EXPECT_EQ(std::memcmp(d.lse.data(), lse_full.data(), lse_full.size() * 4), 0) << "struct_size " << size;
  }
}

TEST(KvcacheCpu, TrustedTablesNeverWriteOutsideTheCache) {
  // A bad page index with tables_trusted = 1 is not read: its keys count as zeros, appends to it are
  // dropped, and nothing outside the buffers is touched (run under ASan/valgrind to see it).
  KvData d(small_paged());
  d.args.tables_trusted = 1;
  d.table[0] = 1 << 29;
  EXPECT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error();
}

TEST(KvcacheCpu, NumSplitsQuery) {
  KvData d(small_paged());
  EXPECT_EQ(flashbox_kvcache_num_splits(&d.args), 1);  // the CPU does not split
  d.args.num_splits = 7;
  EXPECT_EQ(flashbox_kvcache_num_splits(&d.args), 7);
}

}  // namespace
}  // namespace flashbox::test
