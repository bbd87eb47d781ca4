// The Hopper MLA decode kernel (src/cuda/decode/sm90): its route (which KV-cache calls it takes, the
// reason it gives for the others) and split choice on the CPU; on an sm90 GPU the kernel against the
// fp64 KV-cache reference on fresh random inputs with outliers (seed in every message): batch 1, 3
// and 4 (the bar's shape but its batch), cache lengths 1..4097 with a zero-length entry, heads_q 16 /
// 64 / 128, seqlen_q 1 and 2 (causal), contiguous, indexed and paged caches (page 64 and 48), chosen
// and forced split counts, bf16 and fp16, the qv form and FlashMLA's 576 form; outputs poisoned (NaN)
// and framed by guard bytes, NaN never passes. The GPU tests skip without an sm90 device or an
// sm_90a build.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/decode/sm90/mla_tile_policy.hpp"
#include "decode/kvcache_case.hpp"

#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>

#include "support/device_buffers.hpp"
#endif

namespace flashbox::test {
namespace {

using sm90::mla::mla_choose_splits;
using sm90::mla::mla_decline;

// ---- the route, on the host --------------------------------------------------------------------

// The bar's call (128 query heads, one latent head, d 64 + 512 with qv, paged cache of page 64) as
// arguments the route reads; the pointers are aligned addresses that are never dereferenced.
flashbox_kvcache_args bar_args() {
  flashbox_kvcache_args a{};
  a.struct_size = int32_t(sizeof a);
  a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16;
  a.batch = 64, a.seqlen_q = 1, a.heads_q = 128, a.heads_kv = 1, a.head_dim = 64, a.head_dim_v = 512;
  const auto at = [](uintptr_t x) { return reinterpret_cast<void *>(x); };
  a.q = at(0x10000), a.qv = at(0x20000), a.k_cache = at(0x30000), a.v_cache = at(0x40000), a.o = at(0x50000);
  const int64_t q_s[3] = {128 * 64, 128 * 64, 64}, qv_s[3] = {128 * 512, 128 * 512, 512};
  const int64_t o_s[3] = {128 * 512, 128 * 512, 512};
  for (int i = 0; i < 3; ++i) a.q_stride[i] = q_s[i], a.qv_stride[i] = qv_s[i], a.o_stride[i] = o_s[i];
  a.k_cache_stride[0] = 64 * 64, a.k_cache_stride[1] = 64, a.k_cache_stride[2] = 64;
  a.v_cache_stride[0] = 64 * 512, a.v_cache_stride[1] = 512, a.v_cache_stride[2] = 512;
  a.cache_rows = 64, a.cache_entries = 64 * 64;
  a.block_table = static_cast<const int32_t *>(at(0x60000)), a.max_blocks_per_seq = 64, a.block_table_stride = 64;
  a.cache_seqlens = static_cast<const int32_t *>(at(0x70000));
  return a;
}

// FlashMLA's form: k_cache 576 wide, v_cache its first 512 columns (the same pointer and strides).
flashbox_kvcache_args bar_args_576() {
  flashbox_kvcache_args a = bar_args();
  a.qv = nullptr;
  for (int i = 0; i < 3; ++i) a.qv_stride[i] = 0;
  a.head_dim = 576;
  a.q_stride[0] = a.q_stride[1] = 128 * 576, a.q_stride[2] = 576;
  a.k_cache_stride[0] = 64 * 576, a.k_cache_stride[1] = a.k_cache_stride[2] = 576;
  a.v_cache = a.k_cache;
  for (int i = 0; i < 3; ++i) a.v_cache_stride[i] = a.k_cache_stride[i];
  return a;
}

TEST(MlaDecodeRoute, TakesTheBarShapeAndDeclinesOthersWithAReason) {
  EXPECT_EQ(mla_decline(bar_args(), 9), "");
  EXPECT_EQ(mla_decline(bar_args_576(), 9), "");
  flashbox_kvcache_args fp16 = bar_args();
  fp16.dtype = FLASHBOX_FLOAT16;
  EXPECT_EQ(mla_decline(fp16, 9), "");
  // Any rows (padded last tile), contiguous caches with cache_batch_idx, causal, num_splits.
  flashbox_kvcache_args other = bar_args();
  other.heads_q = 16, other.seqlen_q = 3, other.causal = 1, other.num_splits = 5;
  other.block_table = nullptr, other.cache_batch_idx = other.cache_seqlens, other.cache_rows = 4096;
  EXPECT_EQ(mla_decline(other, 9), "");

  struct Decline {
    const char *what;  // a word the reason must contain
    void (*edit)(flashbox_kvcache_args &);
    int cc_major = 9;
  };
  const Decline declines[] = {
      {"compute capability 8", [](flashbox_kvcache_args &) {}, 8},
      {"compute capability 10", [](flashbox_kvcache_args &) {}, 10},
      {"device", [](flashbox_kvcache_args &a) { a.device = FLASHBOX_CPU; }},
      {"dtype", [](flashbox_kvcache_args &a) { a.dtype = FLASHBOX_FLOAT32; }},
      {"head_dim_v = 256", [](flashbox_kvcache_args &a) { a.head_dim_v = 256; }},
      {"head_dim = 128 with qv", [](flashbox_kvcache_args &a) { a.head_dim = 128; }},
      {"head_dim = 64 without qv", [](flashbox_kvcache_args &a) { a.qv = nullptr; }},
      {"heads_kv = 2", [](flashbox_kvcache_args &a) { a.heads_kv = 2; }},
      {"append", [](flashbox_kvcache_args &a) { a.k_new = a.q, a.v_new = a.qv, a.seqlen_new = 1; }},
      {"window", [](flashbox_kvcache_args &a) { a.has_window = 1, a.window_left = 100, a.window_right = 0; }},
      {"softcap", [](flashbox_kvcache_args &a) { a.softcap = 30.f; }},
      {"ALiBi", [](flashbox_kvcache_args &a) { a.alibi_slopes = static_cast<const float *>(a.q); }},
      {"sinks", [](flashbox_kvcache_args &a) { a.learnable_sink = static_cast<const float *>(a.q); }},
      {"attention_chunk", [](flashbox_kvcache_args &a) { a.attention_chunk = 128; }},
      {"cache_leftpad", [](flashbox_kvcache_args &a) { a.cache_leftpad = a.cache_seqlens; }},
      {"fp8", [](flashbox_kvcache_args &a) { a.cache_dtype = FLASHBOX_FLOAT8_E4M3; }},
      {"q or its strides", [](flashbox_kvcache_args &a) { a.q_stride[2] = 68; }},
      {"qv or its strides", [](flashbox_kvcache_args &a) { a.qv = static_cast<const char *>(a.qv) + 8; }},
      {"k_cache / v_cache", [](flashbox_kvcache_args &a) { a.v_cache_stride[1] = 516; }},
      {"o or its strides", [](flashbox_kvcache_args &a) { a.o_stride[2] = 513; }},
      {"batch = 70000", [](flashbox_kvcache_args &a) { a.batch = 70000; }},
  };
  for (const Decline &d : declines) {
    flashbox_kvcache_args a = bar_args();
    d.edit(a);
    const std::string why = mla_decline(a, d.cc_major);
    EXPECT_NE(why.find(d.what), std::string::npos)
        << "expected a reason naming '" << d.what << "', got '" << why << "'";
  }
  // The 576 form needs V to be K's first 512 columns.
  flashbox_kvcache_args own_v = bar_args_576();
  own_v.v_cache = static_cast<char *>(own_v.v_cache) + (1 << 20);
  EXPECT_NE(mla_decline(own_v, 9).find("first 512 columns"), std::string::npos);
  flashbox_kvcache_args other_stride = bar_args_576();
  other_stride.v_cache_stride[1] = 1024;
  EXPECT_NE(mla_decline(other_stride, 9).find("first 512 columns"), std::string::npos);
  flashbox_kvcache_args wide = bar_args_576();
  wide.head_dim = 320;
  EXPECT_NE(mla_decline(wide, 9).find("head_dim = 320 without qv"), std::string::npos);
  // A window with both sides unbounded is no window.
  flashbox_kvcache_args open = bar_args();
  open.has_window = 1, open.window_left = -1, open.window_right = -1;
  EXPECT_EQ(mla_decline(open, 9), "");
}

TEST(MlaDecodeRoute, SplitChoice) {
  // The bar: 64 entries x 2 row tiles fill 128 of 132 SMs: no split.
  EXPECT_EQ(mla_choose_splits(128, 4096, 132), 1);
  // One entry of 2 tiles: the keys split over the SMs, at most one split per block and kMaxSplits.
  const int one = mla_choose_splits(2, 4096, 132);
  EXPECT_GT(one, 16);
  EXPECT_LE(one, 64);  // 64 blocks
  EXPECT_EQ(mla_choose_splits(1, 1 << 20, 132) <= sm90::mla::kMaxSplits, true);
  // Nothing to split.
  EXPECT_EQ(mla_choose_splits(2, 0, 132), 1);
  EXPECT_EQ(mla_choose_splits(2, 64, 132), 1);
  // Never more splits than blocks, never fewer than 1, for a sweep of shapes.
  for (int64_t base : {1, 2, 3, 8, 64, 131, 132, 133, 1000})
    for (int64_t keys : {1, 63, 65, 1000, 4097, 100000}) {
      const int s = mla_choose_splits(base, keys, 132);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, std::max<int64_t>(1, (keys + 63) / 64)) << base << " " << keys;
    }
}

// ---- the kernel, on an sm90 GPU ----------------------------------------------------------------

#if defined(FLASHBOX_HAVE_CUDA) && defined(FLASHBOX_HAVE_SM90)
bool have_sm90() {
  if (flashbox_cuda_device_count() <= 0) return false;
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev))
    return false;
  return major == 9;
}
#define SKIP_WITHOUT_SM90() \
  if (!have_sm90()) GTEST_SKIP() << "no sm90 (Hopper) CUDA device visible: the MLA decode kernel needs one"
#else
#define SKIP_WITHOUT_SM90() GTEST_SKIP() << "built without CUDA for sm_90a: the MLA decode kernel is not compiled"
#endif

#ifdef FLASHBOX_HAVE_CUDA
constexpr const char *kMlaKernel = "cuda_mla_decode_sm90_";

// The qv form: q/k 64 wide, qv/v 512, one KV head, no append.
KvCase mla_case(int64_t batch, int64_t heads_q, int64_t seqlen_q, CacheLayout layout, int64_t page_size,
                int64_t capacity) {
  KvCase c;
  c.device = FLASHBOX_CUDA;
  c.batch = batch, c.seqlen_q = seqlen_q, c.heads_q = heads_q, c.heads_kv = 1;
  c.head_dim = 64, c.head_dim_v = 512, c.qv = true;
  c.layout = layout, c.page_size = page_size, c.capacity = capacity;
  c.causal = seqlen_q > 1;
  c.q_scale = 1.f, c.outliers = true;
  return c;
}

// Runs the call on the device with o and lse in guard-framed, NaN-poisoned buffers; checks the
// kernel that ran (its name contains `kernel`), the guards, and o / lse against the reference.
// form576: FlashMLA's form, built from the qv case's data: k_cache 576 wide, V its first 512
// columns, q 576 wide ([q | qv]); the reference is rebuilt on those values.
void run_checked(KvCase c, const std::string &kernel, bool form576 = false) {
  if (form576) {
    c.qv = false, c.head_dim = 576;  // q and k 576 wide; head_dim_v stays 512
  }
  KvData d(c);
  SCOPED_TRACE(d.name());
  if (form576) {  // V = K's first 512 columns: the reference's V buffer made so, v_cache not passed
    const int64_t n_rows = int64_t(d.k_cache.size() / size_t(d.es)) / 576;
    for (int64_t r = 0; r < n_rows; ++r)
      std::memcpy(&d.v_cache[size_t(r * 512 * d.es)], &d.k_cache[size_t(r * 576 * d.es)], size_t(512 * d.es));
    d.v_expected = d.v_cache;
    d.build_reference(c.layout == CacheLayout::Paged ? d.pages_per_seq * c.page_size : c.capacity);
  }
  d.to_device();
  if (form576) {
    d.args.v_cache = d.args.k_cache;
    for (int i = 0; i < 3; ++i) d.args.v_cache_stride[i] = d.args.k_cache_stride[i];
  }
  GuardedOutput o(d.o.size()), lse(d.lse.size() * sizeof(float));
  ASSERT_TRUE(o.raw && lse.raw);
  d.args.o = o.ptr(), d.args.lse = static_cast<float *>(lse.ptr());
  const int splits = flashbox_kvcache_num_splits(&d.args);
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), FLASHBOX_OK) << flashbox_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (!form576) d.from_device();  // o, lse and the caches (an append writes them); 576: v_cache is k_cache
  const std::string ran = flashbox_last_kernel();
  EXPECT_NE(ran.find(kernel), std::string::npos) << ran;
  if (ran.find(kMlaKernel) != std::string::npos) {
    EXPECT_NE(ran.find("_splits" + std::to_string(splits)), std::string::npos) << ran << " vs " << splits;
  }
  EXPECT_TRUE(o.back(d.o)) << "a guard byte around o changed (write out of bounds)";
  std::vector<uint8_t> lse_bytes;
  EXPECT_TRUE(lse.back(lse_bytes)) << "a guard byte around lse changed (write out of bounds)";
  std::memcpy(d.lse.data(), lse_bytes.data(), lse_bytes.size());
  d.check();
}
#endif

TEST(MlaDecodeCuda, CacheLengthsAndLayouts) {
  SKIP_WITHOUT_SM90();
#ifdef FLASHBOX_HAVE_CUDA
  // Batch 3: the length under test, an empty entry, a short one.
  for (int64_t len : {1, 17, 63, 64, 65, 1000, 4097})
    for (int layout = 0; layout < 4; ++layout) {
      const CacheLayout l = layout == 0   ? CacheLayout::Contiguous
                            : layout == 1 ? CacheLayout::Indexed
                                          : CacheLayout::Paged;
      const int64_t page = layout == 3 ? 48 : 64;
      KvCase c = mla_case(3, 64, 1, l, page, len + 20);
      c.lengths = {len, 0, std::min<int64_t>(len, 37)};
      run_checked(c, kMlaKernel);
    }
#endif
}

TEST(MlaDecodeCuda, HeadsAndQueryTokens) {
  SKIP_WITHOUT_SM90();
#ifdef FLASHBOX_HAVE_CUDA
  for (int64_t heads : {16, 64, 128})
    for (int64_t seqlen_q : {1, 2})
      for (int64_t batch : {1, 3})
        for (int64_t len : {65, 4097}) {
          KvCase c = mla_case(batch, heads, seqlen_q, CacheLayout::Paged, 64, 4160);
          c.lengths = {len, 0, 1000};
          run_checked(c, kMlaKernel);
        }
  // Causal with more query tokens than some entries' keys: the early tokens see no key.
  KvCase few = mla_case(3, 16, 2, CacheLayout::Paged, 48, 100);
  few.lengths = {1, 0, 2};
  run_checked(few, kMlaKernel);
#endif
}

TEST(MlaDecodeCuda, BarShapeAtBatch4) {
  // The bar's call (128 heads, 4096 keys in pages of 64, seqlen_q 1 and 2) at batch 4 instead of 64
  // (the fp64 reference's time): the same kernel, fewer CTAs; the split choice is the policy's.
  SKIP_WITHOUT_SM90();
#ifdef FLASHBOX_HAVE_CUDA
  for (int64_t seqlen_q : {1, 2}) {
    KvCase c = mla_case(4, 128, seqlen_q, CacheLayout::Paged, 64, 4096);
    c.fixed_len = true;
    run_checked(c, kMlaKernel);
  }
#endif
}

TEST(MlaDecodeCuda, SplitsAndDtypes) {
  SKIP_WITHOUT_SM90();
#ifdef FLASHBOX_HAVE_CUDA
  for (flashbox_dtype dtype : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16})
    for (int splits : {0, 1, 3, 7, 64}) {
      KvCase c = mla_case(3, 128, 2, CacheLayout::Paged, 64, 2000);
      c.dtype = dtype, c.num_splits = splits;
      c.lengths = {1999, 0, 130};
      run_checked(c, kMlaKernel);
    }
  // Trusted tables (no host read: the split policy sees the capacity) still run the kernel.
  KvCase c = mla_case(2, 128, 1, CacheLayout::Paged, 64, 1000);
  KvData d(c);
  d.args.tables_trusted = 1;
  d.to_device();
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), FLASHBOX_OK) << flashbox_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_NE(std::string(flashbox_last_kernel()).find(kMlaKernel), std::string::npos) << flashbox_last_kernel();
  d.from_device();
  d.check();
#endif
}

TEST(MlaDecodeCuda, FlashMlaForm576) {
  SKIP_WITHOUT_SM90();
#ifdef FLASHBOX_HAVE_CUDA
  for (int64_t len : {1, 65, 1000}) {
    KvCase c = mla_case(3, 128, 1, CacheLayout::Paged, 64, 1024);
    c.lengths = {len, 0, 300};
    run_checked(c, kMlaKernel, true);
  }
  KvCase causal = mla_case(2, 64, 2, CacheLayout::Contiguous, 64, 500);
  run_checked(causal, kMlaKernel, true);
#endif
}

TEST(MlaDecodeCuda, RouteDeclinesToTheExplicitForward) {
  SKIP_WITHOUT_SM90();
#ifdef FLASHBOX_HAVE_CUDA
  KvCase append = mla_case(2, 64, 1, CacheLayout::Paged, 64, 300);
  append.seqlen_new = 1;  // an append: the explicit forward
  run_checked(append, "cuda_explicit");
  KvCase gqa = mla_case(2, 64, 1, CacheLayout::Paged, 64, 300);
  gqa.heads_kv = 2;  // two latent heads: the explicit forward
  run_checked(gqa, "cuda_explicit");
  KvCase softcap = mla_case(2, 64, 1, CacheLayout::Paged, 64, 300);
  softcap.softcap = 20.f;
  run_checked(softcap, "cuda_explicit");
#endif
}

}  // namespace
}  // namespace flashbox::test

#undef SKIP_WITHOUT_SM90  // a macro of this file only (tests compile in unity batches)
