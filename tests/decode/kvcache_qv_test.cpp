// flashbox_kvcache_args.qv, head_dim_v and attention_chunk (FlashAttention-3's MLA decode: d 64 +
// dv 512 with one latent KV head, a V of its own head dim, chunked local attention): the cpu row loop
// and the CUDA explicit forward (or the Hopper MLA decode kernel where it takes the call) against the
// fp64 KV-cache reference on the gathered cache (appends checked in the cache, outputs poisoned
// first, NaN never passes), every cache layout, paged caches of
// page 16 and 256, rotary with qv, sinks, windows, softcap, leftpad, GQA/MQA, cache lengths 1..1000;
// bad arguments refused with nothing written; an older struct_size reads the fields as off. The GPU
// tests skip without a GPU.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "decode/kvcache_case.hpp"
#include "support/gpu_check.hpp"

namespace flashbox::test {
namespace {

// MLA decode: 64 query/key columns, 512 value columns, qv, one KV head.
KvCase mla(flashbox_device device) {
  KvCase c;
  c.device = device;
  c.batch = 2, c.seqlen_q = 1, c.heads_q = 16, c.heads_kv = 1, c.head_dim = 64, c.head_dim_v = 512, c.qv = true;
  c.capacity = 200, c.seqlen_new = 1, c.causal = 1;
  c.q_scale = 1.0f;
  return c;
}

// The variants both devices run on `base`: layouts, masks, transforms, sinks, rotary, chunk, dv without qv.
std::vector<KvCase> variants(const KvCase &base) {
  std::vector<KvCase> out;
  for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Indexed, CacheLayout::Paged}) {
    KvCase c = base;
    c.layout = layout;
    out.push_back(c);
  }
  KvCase page256 = base;
  page256.layout = CacheLayout::Paged, page256.page_size = 256, page256.capacity = 600;
  out.push_back(page256);
  KvCase multi = base;  // several query tokens, GQA, a window and leftpad
  multi.seqlen_q = 4, multi.seqlen_new = 4, multi.heads_q = 8, multi.heads_kv = 2, multi.leftpad = true;
  multi.has_window = 1, multi.window_left = 40, multi.window_right = 0;
  out.push_back(multi);
  KvCase capped = base;
  capped.softcap = 15.f, capped.q_scale = 3.f, capped.alibi = true;
  out.push_back(capped);
  KvCase sink = base;
  sink.sink = true, sink.lengths = {0};  // entry 0 holds only the new key; with seqlen_q 2 row 0 sees none
  sink.seqlen_q = 2, sink.seqlen_new = 1;
  out.push_back(sink);
  KvCase chunk = base;
  chunk.seqlen_q = 5, chunk.seqlen_new = 5, chunk.attention_chunk = 7, chunk.heads_q = 4;
  out.push_back(chunk);
  KvCase chunk_leftpad = chunk;  // chunks counted from cache_leftpad (FlashAttention-3's positions)
  chunk_leftpad.leftpad = true, chunk_leftpad.layout = CacheLayout::Paged;
  out.push_back(chunk_leftpad);
  KvCase chunk_plain = chunk;  // attention_chunk alone (no qv, V of head_dim): the explicit forward too
  chunk_plain.qv = false, chunk_plain.head_dim_v = 0, chunk_plain.head_dim = 128;
  out.push_back(chunk_plain);
  KvCase rotary = base;
  rotary.rotary_dim = 32, rotary.rotary_interleaved = 1, rotary.seqlen_q = 3, rotary.seqlen_new = 3;
  out.push_back(rotary);
  KvCase dv256 = base;  // head_dim_v != head_dim without qv
  dv256.qv = false, dv256.head_dim_v = 256;
  out.push_back(dv256);
  KvCase mla576 = base;  // FlashMLA's 576 / 512 without qv
  mla576.qv = false, mla576.head_dim = 576, mla576.capacity = 80;
  out.push_back(mla576);
  return out;
}

void run(KvCase c) {
  KvData d(c);
  SCOPED_TRACE(d.name());
#ifdef FLASHBOX_HAVE_CUDA
  if (c.device == FLASHBOX_CUDA) d.to_device();
#endif
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), FLASHBOX_OK) << flashbox_last_error();
#ifdef FLASHBOX_HAVE_CUDA
  if (c.device == FLASHBOX_CUDA) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    d.from_device();
    // The explicit forward, or on a Hopper the MLA decode kernel where its route takes the call
    // (tests/decode/mla_decode_test.cpp tests which).
    const std::string ran = flashbox_last_kernel();
    EXPECT_TRUE(ran.find("cuda_explicit") != std::string::npos || ran.find("cuda_mla_decode_sm90") != std::string::npos)
        << ran;
  }
#endif
  d.check();
}

TEST(KvcacheQvCpu, MatchesReference) {
  for (flashbox_dtype dtype : {FLASHBOX_FLOAT32, FLASHBOX_BFLOAT16}) {
    KvCase base = mla(FLASHBOX_CPU);
    base.dtype = dtype;
    for (const KvCase &c : variants(base)) run(c);
  }
}

TEST(KvcacheQvCpu, DefaultScaleIsOneOverSqrtOfBothHeadDims) {
  // softmax_scale 0 with qv means 1/sqrt(head_dim + head_dim_v): the same bytes as that scale given.
  KvCase c = mla(FLASHBOX_CPU);
  c.seqlen_new = 0;
  KvData d(c);
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), FLASHBOX_OK) << flashbox_last_error();
  const std::vector<uint8_t> by_default = d.o;
  KvData e(c);
  e.args.softmax_scale = float(1.0 / std::sqrt(576.0));
  ASSERT_EQ(flashbox_attention_kvcache(&e.args), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(by_default == e.o);
}

TEST(KvcacheQvCpu, OlderStructSizeReadsTheFieldsAsOff) {
  // A caller compiled before qv/head_dim_v/attention_chunk passes the shorter struct_size: whatever
  // lies past it is not read (here garbage that would fail every check).
  KvCase c;
  c.batch = 2, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 16, c.capacity = 40, c.seqlen_new = 1;
  KvData want(c);
  ASSERT_EQ(flashbox_attention_kvcache(&want.args), FLASHBOX_OK) << flashbox_last_error();
  KvData d(c);
  d.args.struct_size = int32_t(offsetof(flashbox_kvcache_args, qv));
  d.args.qv = reinterpret_cast<const void *>(uintptr_t(8)), d.args.qv_stride[1] = -3;
  d.args.head_dim_v = -7, d.args.attention_chunk = -1;
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(d.o == want.o);
  EXPECT_EQ(std::memcmp(d.lse.data(), want.lse.data(), want.lse.size() * 4), 0);
}

TEST(KvcacheQvCpu, RefusesBadArguments) {
  KvCase c = mla(FLASHBOX_CPU);
  c.dtype = FLASHBOX_BFLOAT16, c.capacity = 40, c.head_dim_v = 128;
  SCOPED_TRACE("refusals");
  expect_refused(c, FLASHBOX_ERR_INVALID_ARGUMENT, "qv_stride = {",
                 [](KvData &x) { x.args.qv = nullptr; });  // the strides stay set
  expect_refused(c, FLASHBOX_ERR_INVALID_SIZE, "head_dim_v = -1", [](KvData &x) { x.args.head_dim_v = -1; });
  expect_refused(c, FLASHBOX_ERR_INVALID_ARGUMENT, "attention_chunk = -2",
                 [](KvData &x) { x.args.attention_chunk = -2; });
  expect_refused(c, FLASHBOX_ERR_BAD_STRIDE, "qv_stride", [](KvData &x) { x.args.qv_stride[1] = 0; });
  expect_refused(c, FLASHBOX_ERR_INVALID_ARGUMENT, "overlaps", [](KvData &x) { x.args.qv = x.o.data(); });
  expect_refused(c, FLASHBOX_ERR_INVALID_ARGUMENT, "overlaps",  // qv read while the cache is appended to
                 [](KvData &x) { x.args.qv = x.v_cache.data(); });
  expect_refused(c, FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 584", [](KvData &x) { x.args.head_dim_v = 584; });
  // device = cuda: the explicit forward's limits, checked before any device check (no GPU needed).
  expect_refused(c, FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 520",
                 [](KvData &x) { x.args.device = FLASHBOX_CUDA, x.args.head_dim_v = 520; });
  expect_refused(c, FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim_v = 100",
                 [](KvData &x) { x.args.device = FLASHBOX_CUDA, x.args.head_dim_v = 100; });
  expect_refused(c, FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim = 584",
                 [](KvData &x) { x.args.device = FLASHBOX_CUDA, x.args.head_dim = 584; });
  expect_refused(c, FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim = 60",
                 [](KvData &x) { x.args.device = FLASHBOX_CUDA, x.args.head_dim = 60; });
}

TEST(KvcacheQvCpu, RefusedWithAnFp8Cache) {
  KvCase c;
  c.dtype = FLASHBOX_BFLOAT16, c.fp8_cache = true, c.batch = 2, c.heads_q = 4, c.heads_kv = 1, c.head_dim = 64;
  c.capacity = 40, c.seqlen_new = 1;
  expect_refused(c, FLASHBOX_ERR_UNSUPPORTED_IMPL, "qv with cache_dtype", [](KvData &x) {
    x.args.qv = x.q.data();  // head_dim_v = head_dim: q's shape is qv's
    std::memcpy(x.args.qv_stride, x.args.q_stride, sizeof x.args.qv_stride);
  });
  expect_refused(c, FLASHBOX_ERR_UNSUPPORTED_IMPL, "attention_chunk with cache_dtype",
                 [](KvData &x) { x.args.attention_chunk = 8; });
  expect_refused(c, FLASHBOX_ERR_UNSUPPORTED_IMPL, "head_dim_v != head_dim with cache_dtype",
                 [](KvData &x) { x.args.head_dim_v = 32; });
}

// ---- device = cuda: the explicit forward ----

TEST(KvcacheQvCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  for (flashbox_dtype dtype : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16}) {
    KvCase base = mla(FLASHBOX_CUDA);
    base.dtype = dtype;
    for (const KvCase &c : variants(base)) run(c);
  }
}

TEST(KvcacheQvCuda, CacheLengths) {
  // One chunk of 32 keys, its edges, many chunks; the second entry's cache at 1 key (short_len).
  SKIP_WITHOUT_GPU();
  for (int64_t len : {1, 17, 31, 32, 33, 63, 64, 65, 1000})
    for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Paged}) {
      KvCase c = mla(FLASHBOX_CUDA);
      c.dtype = FLASHBOX_BFLOAT16, c.layout = layout, c.capacity = 1024, c.seqlen_new = 0;
      c.lengths = {len};
      run(c);
    }
}

TEST(KvcacheQvCuda, GqaMqaAndQueryTokens) {
  SKIP_WITHOUT_GPU();
  const int64_t heads[][2] = {{16, 1}, {8, 2}, {4, 4}};
  for (const auto &h : heads)
    for (int64_t seqlen_q : {1, 3, 17})
      for (int causal : {0, 1}) {
        KvCase c = mla(FLASHBOX_CUDA);
        c.dtype = FLASHBOX_BFLOAT16, c.heads_q = h[0], c.heads_kv = h[1], c.seqlen_q = seqlen_q;
        c.seqlen_new = seqlen_q, c.causal = causal, c.layout = CacheLayout::Paged;
        run(c);
      }
}

TEST(KvcacheQvCuda, TrustedTablesAndSplitsAsked) {
  // tables_trusted skips the host read (graph capture); num_splits is a hint the explicit forward
  // does not need (flashbox_kvcache_num_splits says 1).
  SKIP_WITHOUT_GPU();
#ifdef FLASHBOX_HAVE_CUDA
  KvCase c = mla(FLASHBOX_CUDA);
  c.dtype = FLASHBOX_BFLOAT16, c.layout = CacheLayout::Paged, c.num_splits = 3;
  KvData d(c);
  d.args.tables_trusted = 1;
  d.to_device();
  EXPECT_EQ(flashbox_kvcache_num_splits(&d.args), 1) << flashbox_last_error();
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  d.from_device();
  d.check();
#endif
}

}  // namespace
}  // namespace flashbox::test
