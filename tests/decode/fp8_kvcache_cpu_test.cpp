// flashbox_attention_kvcache with an fp8 e4m3 cache (cache_dtype = FLASHBOX_FLOAT8_E4M3) on device =
// cpu (runs in CI): every cache layout, descales none / per tensor / per (batch, kv head), appends
// quantized on write (bytes compared with core/float8.hpp's rounding), outliers in K, masks and sinks,
// all against the fp64 reference on the dequantized cache (relative error < 1e-2, as the same-precision
// bf16 calls); and the fp8 argument checks, each refused with its code, its message and nothing written.
// Seeds are printed with every failure (FLASHBOX_TEST_SEED reruns one).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <limits>
#include <string>

#include "core/float8.hpp"
#include "decode/kvcache_case.hpp"

namespace flashbox::test {
namespace {

KvCase fp8_case() {
  KvCase c;
  c.fp8_cache = true, c.k_outliers = true;
  c.dtype = FLASHBOX_BFLOAT16, c.layout = CacheLayout::Paged, c.page_size = 16;
  c.batch = 3, c.seqlen_q = 2, c.heads_q = 8, c.heads_kv = 2, c.head_dim = 32, c.capacity = 90;
  c.seqlen_new = 3;
  return c;
}

TEST(Fp8KvcacheCpu, LayoutsDescalesAndAppends) {
  for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Indexed, CacheLayout::Paged})
    for (int descale : {0, 1, 2})
      for (flashbox_dtype dt : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16})
        for (int64_t seqlen_new : {0, 3})
          for (int causal : {0, 1}) {
            KvCase c = fp8_case();
            c.layout = layout, c.descale = descale, c.dtype = dt, c.seqlen_new = seqlen_new, c.causal = causal;
            run_cpu(c);
          }
}

TEST(Fp8KvcacheCpu, PageSizesAndLengths) {
  for (int64_t page : {16, 48})
    for (int64_t short_len : {0, 1, 17}) {
      KvCase c = fp8_case();
      c.page_size = page, c.short_len = short_len, c.capacity = 130, c.seqlen_new = short_len == 0 ? 0 : 2;
      run_cpu(c);
    }
}

TEST(Fp8KvcacheCpu, MaskingOptionsAndSinks) {
  KvCase base = fp8_case();
  base.seqlen_q = 3, base.heads_q = 6, base.capacity = 70;
  for (KvCase c :
       masking_variants(base,
                        {.causal_window_left = 5, .window_left = 7, .window_right = 3, .softcap = 3.f, .q_scale = 6.f}))
    for (bool sink : {false, true}) {
      c.sink = sink;
      run_cpu(c);
    }
}

TEST(Fp8KvcacheCpu, LengthsAndZeroDescale) {
  // Entries of 0, 1, 17, 1000 and 4097 cached keys; the last entry's kv head 0 has descales 0 (its
  // appended rows are written as 0 and its keys and values read as 0).
  for (CacheLayout layout : {CacheLayout::Contiguous, CacheLayout::Paged})
    for (int64_t seqlen_new : {0, 1}) {
      KvCase c = fp8_case();
      c.layout = layout, c.page_size = 256, c.batch = 5, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 16;
      c.capacity = 4097 + 1, c.seqlen_q = 1, c.seqlen_new = seqlen_new, c.causal = 1, c.zero_descale = true;
      c.lengths = {0, 1, 17, 1000, 4097};
      run_cpu(c);
    }
}

TEST(Fp8KvcacheCpu, SubnormalCodes) {
  for (flashbox_dtype dt : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16}) {
    KvCase c = fp8_case();
    c.dtype = dt, c.subnormal_codes = true, c.k_outliers = false;
    run_cpu(c);
  }
}

TEST(Fp8KvcacheCpu, GqaAndMqa) {
  for (int64_t heads_kv : {8, 1}) {
    KvCase c = fp8_case();
    c.heads_q = 32, c.heads_kv = heads_kv, c.head_dim = 64, c.seqlen_q = 1, c.batch = 2, c.capacity = 200;
    run_cpu(c);
  }
}

// One batch entry, one KV head, one appended row: the bytes written for chosen values and scales.
struct AppendProbe {
  std::vector<uint16_t> q, k_new, v_new, o;
  std::vector<uint8_t> k_cache, v_cache;
  std::vector<int32_t> seqlens{0};
  float k_descale = 1.f, v_descale = 1.f;
  flashbox_kvcache_args a{};
  static constexpr int64_t D = 16;

  AppendProbe() : q(D, 0), k_new(D, 0), v_new(D, 0), o(D, 0), k_cache(4 * D, 0x11), v_cache(4 * D, 0x11) {
    a.struct_size = int32_t(sizeof a);
    a.device = FLASHBOX_CPU, a.dtype = FLASHBOX_BFLOAT16, a.cache_dtype = FLASHBOX_FLOAT8_E4M3;
    a.batch = a.seqlen_q = a.heads_q = a.heads_kv = 1, a.head_dim = D;
    a.cache_entries = 1, a.cache_rows = 4, a.seqlen_new = 1;
    for (int64_t *s : {a.q_stride, a.o_stride, a.k_new_stride, a.v_new_stride}) s[0] = s[1] = s[2] = D;
    for (int64_t *s : {a.k_cache_stride, a.v_cache_stride}) s[0] = 4 * D, s[1] = D, s[2] = D;
  }
  int call() {
    a.q = q.data(), a.o = o.data(), a.k_new = k_new.data(), a.v_new = v_new.data();
    a.k_cache = k_cache.data(), a.v_cache = v_cache.data(), a.cache_seqlens = seqlens.data();
    a.k_descale = &k_descale, a.v_descale = &v_descale;
    return flashbox_attention_kvcache(&a);
  }
};

TEST(Fp8KvcacheCpu, AppendRoundsToNearestEvenAndSaturates) {
  AppendProbe p;
  p.k_descale = 0.5f, p.v_descale = 0.f;  // v: a descale of 0 writes 0
  const float values[] = {1.0f, -1.0f, 1000.f, -1000.f, 0.1f, 3.0f, 17.0f, 0.0f,
                          -0.0f, 1e-6f, 200.f, 230.f, 232.f, 240.f, std::numeric_limits<float>::infinity(), 0.75f};
  for (int64_t x = 0; x < AppendProbe::D; ++x) {
    p.k_new[size_t(x)] = cpu::float_to_bf16(values[x]);
    p.v_new[size_t(x)] = cpu::float_to_bf16(values[x]);
  }
  ASSERT_EQ(p.call(), 0) << flashbox_last_error();
  for (int64_t x = 0; x < AppendProbe::D; ++x) {
    const float kx = cpu::bf16_to_float(p.k_new[size_t(x)]) / 0.5f;
    EXPECT_EQ(p.k_cache[size_t(x)], core::float_to_e4m3(kx)) << "k value " << values[x];
    EXPECT_EQ(p.v_cache[size_t(x)], 0) << "v value " << values[x] << " with descale 0";
  }
  // Spot values: 1000 / 0.5 saturates to +-448 (0x7e / 0xfe), inf too; 17 / 0.5 = 34 is a tie of 32 and
  // 36 that rounds to even (32); 0 stays 0.
  EXPECT_EQ(p.k_cache[2], 0x7e);
  EXPECT_EQ(p.k_cache[3], 0xfe);
  EXPECT_EQ(p.k_cache[14], 0x7e);
  EXPECT_EQ(core::e4m3_to_float(p.k_cache[6]), 32.f);
  EXPECT_EQ(p.k_cache[7], 0);
  // Rows other than the appended one are untouched.
  for (size_t i = AppendProbe::D; i < p.k_cache.size(); ++i) ASSERT_EQ(p.k_cache[i], 0x11) << i;
}

TEST(Fp8KvcacheCpuRefuses, BadScales) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float bad : {-1.f, -0.001f, nan, inf, -inf}) {
    KvData d(fp8_case());
    expect_refused(d, FLASHBOX_ERR_INVALID_ARGUMENT, "k_descale[2, 1] = ",
                   [bad](KvData &x) { x.k_descale[size_t(2 * x.descale_stride() + 1)] = bad; });
    EXPECT_NE(std::string(flashbox_last_error()).find("must be finite and >= 0"), std::string::npos)
        << flashbox_last_error();
    KvData d2(fp8_case());
    expect_refused(d2, FLASHBOX_ERR_INVALID_ARGUMENT, "v_descale[0, 0] = ", [bad](KvData &x) { x.v_descale[0] = bad; });
  }
  KvCase per_tensor = fp8_case();
  per_tensor.descale = 1;
  KvData d(per_tensor);
  expect_refused(d, FLASHBOX_ERR_INVALID_ARGUMENT, "k_descale[0, 0] = ", [](KvData &x) { x.k_descale[0] = -2.f; });
}

TEST(Fp8KvcacheCpuRefuses, Arguments) {
  struct Bad {
    const char *what;
    int code;
    const char *needle;
    void (*mutate)(KvData &);
  };
  const Bad bad[] = {
      {"e5m2 or unknown", FLASHBOX_ERR_UNSUPPORTED_DTYPE, "cache_dtype = 4",
       [](KvData &x) { x.args.cache_dtype = flashbox_dtype(4); }},
      {"cache dtype named", FLASHBOX_ERR_UNSUPPORTED_DTYPE, "cache_dtype = 2",
       [](KvData &x) { x.args.cache_dtype = FLASHBOX_BFLOAT16; }},
      {"fp32 q", FLASHBOX_ERR_UNSUPPORTED_DTYPE, "with dtype = fp32", [](KvData &x) { x.args.dtype = FLASHBOX_FLOAT32; }},
      {"fp8 q", FLASHBOX_ERR_UNSUPPORTED_DTYPE, "dtype = 3", [](KvData &x) { x.args.dtype = FLASHBOX_FLOAT8_E4M3; }},
      {"descale without fp8", FLASHBOX_ERR_INVALID_ARGUMENT, "k_descale is set but cache_dtype = 0",
       [](KvData &x) { x.args.cache_dtype = FLASHBOX_FLOAT32; }},
      {"stride without fp8", FLASHBOX_ERR_INVALID_ARGUMENT, "k_descale_stride = {3, 1} is set but cache_dtype = 0",
       [](KvData &x) { x.args.cache_dtype = FLASHBOX_FLOAT32, x.args.k_descale = x.args.v_descale = nullptr; }},
      {"negative stride", FLASHBOX_ERR_BAD_STRIDE, "k_descale_stride = {-1, 1}",
       [](KvData &x) { x.args.k_descale_stride[0] = -1; }},
      {"NULL with stride", FLASHBOX_ERR_INVALID_ARGUMENT, "v_descale is NULL (1.0) but",
       [](KvData &x) { x.args.v_descale = nullptr; }},
      {"misaligned", FLASHBOX_ERR_MISALIGNED, "k_descale = ",
       [](KvData &x) {
         x.args.k_descale = reinterpret_cast<const float *>(reinterpret_cast<const char *>(x.k_descale.data()) + 1);
       }},
      {"descale inside o", FLASHBOX_ERR_INVALID_ARGUMENT, "overlaps an output",
       [](KvData &x) { x.args.v_descale = reinterpret_cast<const float *>(x.o.data()); }},
      {"rotary", FLASHBOX_ERR_UNSUPPORTED_IMPL, "rotary_cos/rotary_sin with cache_dtype = FLASHBOX_FLOAT8_E4M3",
       [](KvData &x) { x.args.rotary_cos = x.args.rotary_sin = x.q.data(), x.args.rotary_dim = 8; }},
      {"cuda head_dim", FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "multiple of 16",
       [](KvData &x) { x.args.device = FLASHBOX_CUDA, x.args.head_dim = 24; }},
  };
  for (const Bad &b : bad) {
    SCOPED_TRACE(b.what);
    KvData d(fp8_case());
    expect_refused(d, b.code, b.needle, b.mutate);
  }
}

TEST(Fp8KvcacheCpu, OlderStructSizesReadNoCacheDtype) {
  // A caller compiled against the struct before cache_dtype has whatever follows its struct where the
  // fp8 fields would be: the library reads them as 0 / NULL (a cache in the call's dtype).
  KvCase c = fp8_case();
  c.fp8_cache = false, c.k_outliers = false;
  KvData d(c);
  ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
  const std::vector<uint8_t> o_full = d.o;
  KvData d2(c);
  d2.args.struct_size = int32_t(offsetof(flashbox_kvcache_args, cache_dtype));
  d2.args.cache_dtype = FLASHBOX_FLOAT8_E4M3;
  const float bad = -1.f;
  d2.args.k_descale = d2.args.v_descale = &bad;  // refused were they read
  d2.args.k_descale_stride[0] = -5;
  ASSERT_EQ(flashbox_attention_kvcache(&d2.args), 0) << flashbox_last_error() << d2.name();
  EXPECT_TRUE(d2.o == o_full);
}

}  // namespace
}  // namespace flashbox::test
