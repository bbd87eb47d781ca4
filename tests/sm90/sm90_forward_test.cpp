// The Hopper forward (src/cuda/forward/sm90) through the public C API with options.family = sm90, against
// the fp64 reference: every case draws fresh seeded inputs (the seed is in the failure message),
// poisons O/LSE with NaN between guard bytes, and checks rel error < 1e-2, LSE, no NaN, untouched
// guards and padding, and that the sm90 kernel really ran. Skips without a compute capability 9.0 GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "api/tuning.hpp"
#include "api/validate.hpp"
#include "core/backends.hpp"
#include "flashbox/flashbox.h"
#include "sm90/hopper_device.hpp"
#include "support/attention_case.hpp"

namespace flashbox::test::sm90_forward {
namespace {

#define SKIP_WITHOUT_HOPPER() \
  do { \
    std::string why_; \
    if (!have_hopper(why_)) GTEST_SKIP() << "sm90 test not run: " << why_; \
  } while (0)

struct DeviceBuffers {
  void *q = nullptr, *k = nullptr, *v = nullptr, *o_raw = nullptr, *lse_raw = nullptr;
  ~DeviceBuffers() {
    for (void *p : {q, k, v, o_raw, lse_raw})
      if (p) cudaFree(p);
  }
};

struct RunOptions {
  bool with_lse = true;
  int q_offset_elements = 0;  // shifts q off 16-byte alignment to test the fallback reason
  cudaStream_t stream = nullptr;
  std::function<void(AttentionData &)> prepare;  // edits the inputs before the run (and the reference)
  flashbox_options kernel = sm90_options();      // the family (sm90)
  detail::TuningOverrides tuning;                // any tile/schedule asked for (api/tuning.hpp)
  static flashbox_options sm90_options() {
    flashbox_options o;
    flashbox_options_init(&o);
    o.family = FLASHBOX_FAMILY_SM90;
    return o;
  }
};

// Options for one tile ("MxN"; "" the policy's) of the sm90 forward.
RunOptions with_tile(const char *tile) {
  RunOptions o;
  std::sscanf(tile, "%dx%d", &o.tuning.sm90_tile_m, &o.tuning.sm90_tile_n);
  return o;
}

// Runs one case on the GPU; the result lands in d (o, lse) for d.compare().
void run_on_gpu(AttentionData &d, const RunOptions &opt, int *rc, std::string *kernel) {
  DeviceBuffers b;
  const size_t o_size = d.o_bytes().size(), lse_size = d.lse.size() * sizeof(float);
  const size_t q_pad = size_t(opt.q_offset_elements) * 2;
  CUDA_OK(cudaMalloc(&b.q, d.q_bytes().size() + q_pad));
  CUDA_OK(cudaMalloc(&b.k, d.k_bytes().size()));
  CUDA_OK(cudaMalloc(&b.v, d.v_bytes().size()));
  CUDA_OK(cudaMalloc(&b.o_raw, o_size + 2 * kGuard));
  CUDA_OK(cudaMalloc(&b.lse_raw, lse_size + 2 * kGuard));
  uint8_t *o = static_cast<uint8_t *>(b.o_raw) + kGuard;
  float *lse = reinterpret_cast<float *>(static_cast<uint8_t *>(b.lse_raw) + kGuard);
  uint8_t *q = static_cast<uint8_t *>(b.q) + q_pad;
  CUDA_OK(cudaMemset(b.o_raw, kGuardByte, o_size + 2 * kGuard));
  CUDA_OK(cudaMemset(b.lse_raw, kGuardByte, lse_size + 2 * kGuard));
  CUDA_OK(cudaMemcpy(q, d.q_bytes().data(), d.q_bytes().size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(b.k, d.k_bytes().data(), d.k_bytes().size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(b.v, d.v_bytes().data(), d.v_bytes().size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(o, d.o_bytes().data(), o_size, cudaMemcpyHostToDevice));  // NaN poison
  CUDA_OK(cudaMemcpy(lse, d.lse.data(), lse_size, cudaMemcpyHostToDevice));

  flashbox_attention_args a = d.args;
  a.device = FLASHBOX_CUDA;
  a.impl = FLASHBOX_FLASH;
  a.q = q, a.k = b.k, a.v = b.v, a.o = o;
  a.lse = opt.with_lse ? lse : nullptr;
  a.stream = opt.stream;
  {
    const detail::ScopedTuning tuning(opt.tuning);
    *rc = flashbox_attention_forward_opts(&a, &opt.kernel);
  }
  *kernel = *rc == 0 ? flashbox_last_kernel() : flashbox_last_error();
  if (opt.stream) CUDA_OK(cudaStreamSynchronize(opt.stream));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());

  std::vector<uint8_t> o_raw(o_size + 2 * kGuard), lse_raw(lse_size + 2 * kGuard);
  CUDA_OK(cudaMemcpy(o_raw.data(), b.o_raw, o_raw.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(lse_raw.data(), b.lse_raw, lse_raw.size(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(guard_intact(o_raw, o_size)) << "write outside O: " << d.name();
  EXPECT_TRUE(guard_intact(lse_raw, lse_size)) << "write outside LSE: " << d.name();
  std::memcpy(d.o_bytes().data(), o_raw.data() + kGuard, o_size);
  std::memcpy(d.lse.data(), lse_raw.data() + kGuard, lse_size);
}

void check_case(const AttentionCase &c, const RunOptions &opt = {}) {
  AttentionData d(c);
  if (opt.prepare) opt.prepare(d);
  int rc = -1;
  std::string kernel;
  ASSERT_NO_FATAL_FAILURE(run_on_gpu(d, opt, &rc, &kernel));
  ASSERT_EQ(rc, 0) << kernel << " | " << d.name();
  EXPECT_EQ(kernel.rfind("cuda_flash_sm90", 0), 0u) << "ran " << kernel << " | " << d.name();
  const Comparison r = d.compare(opt.with_lse);
  EXPECT_FALSE(r.has_nan) << d.name();
  EXPECT_LT(r.rel_error, 1e-2) << "max abs " << r.max_abs_error << " | " << d.name();
  if (opt.with_lse) EXPECT_LT(r.lse_max_abs_error, 2e-3) << d.name();
  EXPECT_TRUE(d.o_padding_untouched()) << "padding of O written | " << d.name();
}

AttentionCase make(int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal,
                   flashbox_dtype t = FLASHBOX_BFLOAT16, Layout l = Layout::BTHD) {
  AttentionCase c;
  c.batch = b, c.seqlen_q = sq, c.seqlen_k = sk, c.heads_q = hq, c.heads_kv = hkv, c.head_dim = d;
  c.causal = causal, c.dtype = t, c.layout = l;
  c.device = FLASHBOX_CUDA, c.impl = FLASHBOX_FLASH;
  return c;
}

class Sm90 : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_HOPPER(); }
};

TEST_F(Sm90, SmallShapes) {
  for (int64_t d : {64, 128})
    for (int causal : {0, 1})
      for (int64_t t : {1, 17, 64, 128, 200}) {
        SCOPED_TRACE("d" + std::to_string(d) + " causal" + std::to_string(causal) + " t" + std::to_string(t));
        check_case(make(2, t, t, 3, 3, d, causal));
      }
}

TEST_F(Sm90, ManyBlocksOddLength) {
  for (int64_t d : {64, 128})
    for (int causal : {0, 1}) check_case(make(1, 1000, 1000, 2, 2, d, causal));
}

TEST_F(Sm90, LongSequencePipeline) {
  for (int64_t d : {64, 128})
    for (int causal : {0, 1}) check_case(make(1, 2048, 2048, 2, 1, d, causal));
}

TEST_F(Sm90, DifferentQueryAndKeyLengths) {
  // Bottom-right causal: with seqlen_q > seqlen_k the first rows see no key (O = 0, LSE = -inf).
  for (int64_t d : {64, 128})
    for (int causal : {0, 1}) {
      check_case(make(2, 100, 300, 2, 2, d, causal));
      check_case(make(2, 300, 100, 2, 2, d, causal));
      check_case(make(1, 129, 513, 2, 1, d, causal));
    }
}

TEST_F(Sm90, GroupedAndMultiQuery) {
  for (int64_t d : {64, 128}) {
    check_case(make(2, 256, 256, 8, 2, d, 1));
    check_case(make(1, 190, 190, 6, 1, d, 0));
  }
}

TEST_F(Sm90, Layouts) {
  for (Layout l : {Layout::BHTD, Layout::PADDED})
    for (int64_t d : {64, 128}) check_case(make(2, 150, 150, 4, 2, d, 1, FLASHBOX_BFLOAT16, l));
}

TEST_F(Sm90, Float16AndScale) {
  for (int64_t d : {64, 128}) {
    check_case(make(2, 200, 200, 2, 2, d, 1, FLASHBOX_FLOAT16));
    AttentionCase c = make(1, 300, 300, 2, 2, d, 0);
    c.softmax_scale = 0.3f;
    check_case(c);
  }
}

TEST_F(Sm90, WithoutLseAndOnAStream) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  RunOptions opt;
  opt.with_lse = false;
  opt.stream = s;
  check_case(make(2, 333, 333, 2, 2, 128, 1), opt);
  cudaStreamDestroy(s);
}

// Every compiled tile computes the same function.
TEST_F(Sm90, Variants) {
  for (const char *tile : {"128x128", "192x128"}) {
    const RunOptions opt = with_tile(tile);
    for (int causal : {0, 1}) {
      check_case(make(2, 700, 700, 2, 2, 64, causal), opt);
      check_case(make(1, 250, 500, 2, 1, 64, causal), opt);
    }
  }
  for (const char *tile : {"128x128", "128x176"}) {
    const RunOptions opt = with_tile(tile);
    for (int causal : {0, 1}) {
      check_case(make(2, 700, 700, 2, 2, 128, causal), opt);
      check_case(make(1, 250, 500, 2, 1, 128, causal), opt);
      check_case(make(1, 500, 250, 2, 2, 128, causal, FLASHBOX_FLOAT16), opt);
    }
  }
}

// A tile the head_dim has no configuration for is a bad request, not a silent fallback.
TEST_F(Sm90, UnknownTileIsRefused) {
  AttentionData d(make(1, 64, 64, 2, 2, 64, 0));
  int rc = -1;
  std::string message;
  ASSERT_NO_FATAL_FAILURE(run_on_gpu(d, with_tile("128x176"), &rc, &message));
  EXPECT_EQ(rc, FLASHBOX_ERR_INVALID_ARGUMENT) << message;
  EXPECT_NE(message.find("no tile 128x176 for head_dim 64"), std::string::npos) << message;
}

// Lazy rescaling (the running max moves only past 2^8 growth); a large softmax_scale spreads the
// scores so that maxima do jump past the threshold between blocks.
TEST_F(Sm90, LazyRescale) {
  {
    for (int64_t d : {64, 128})
      for (int causal : {0, 1}) {
        for (float scale : {0.f, 2.f}) {
          AttentionCase c = make(2, 777, 777, 2, 1, d, causal);
          c.softmax_scale = scale;
          check_case(c);
        }
        check_case(make(1, 300, 900, 2, 2, d, causal, FLASHBOX_FLOAT16));
      }
  }
}

// Keys [k0, k1) of every batch and head multiplied by f: their scores grow f-fold.
void scale_keys(AttentionData &d, int64_t k0, int64_t k1, float f) {
  const flashbox_attention_args &a = d.args;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t key = k0; key < k1; ++key)
      for (int64_t h = 0; h < a.heads_kv; ++h)
        for (int64_t x = 0; x < a.head_dim; ++x) {
          const int64_t i = b * a.k_stride[0] + key * a.k_stride[1] + h * a.k_stride[2] + x;
          cpu::store_from_float(d.k_bytes().data(), a.dtype, i, f * cpu::load_as_float(d.k_bytes().data(), a.dtype, i));
        }
}

// The optimistic softmax (no row max for unmasked blocks after a tile's first) must hand every block
// whose scores outgrow the running max to the exact path: keys seen late in a tile's walk (low key
// indices; blocks go from the last down) scaled up so that p would reach 2^30 (x8) or overflow
// (x64) against the running max; the warp recomputes its scores and rescales. bf16 and fp16 (whose
// P overflows at 65504), both head_dims and tiles, causal and not.
TEST_F(Sm90, OptimisticSoftmaxFallback) {
  for (float f : {8.f, 64.f})
    for (auto [k0, k1] : {std::pair<int64_t, int64_t>{0, 100}, {300, 420}})
      for (int64_t d : {64, 128})
        for (int causal : {0, 1})
          for (flashbox_dtype t : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16}) {
            SCOPED_TRACE("keys " + std::to_string(k0) + ".." + std::to_string(k1) + " x" + std::to_string(int(f)));
            RunOptions opt;
            opt.prepare = [&](AttentionData &data) { scale_keys(data, k0, k1, f); };
            check_case(make(1, 1000, 1000, 2, 2, d, causal, t), opt);
          }
  RunOptions opt = with_tile("128x176");
  opt.prepare = [](AttentionData &data) { scale_keys(data, 0, 50, 16.f); };
  check_case(make(1, 900, 900, 2, 1, 128, 0), opt);
}

// Persistent CTAs, capped at 3 so that each walks many tiles (rings, Q buffer, O buffer and ping-pong
// turns carry over between tiles), including tiles that see no key at all (seqlen_q > seqlen_k,
// causal); O staged in its own buffer (Q released early) and, for the 128 x 176 tile that has no
// room for one, in the Q rows. The first hang of this schedule was the last V block of a tile not
// advancing the consumers' V ring (bench/NOTES.md).
TEST_F(Sm90, PersistentManyTilesPerCta) {
  const auto persistent3 = [](const char *tile) {
    RunOptions o = with_tile(tile);
    o.tuning.sm90_schedule = detail::Sm90Schedule::persistent;
    o.tuning.sm90_max_ctas = 3;
    return o;
  };
  for (int64_t d : {64, 128})
    for (int causal : {0, 1}) {
      const std::string what = "d" + std::to_string(d) + " causal" + std::to_string(causal);
      std::fprintf(stderr, "persistent case: %s\n", what.c_str());  // a hang shows where it stopped
      SCOPED_TRACE(what);
      check_case(make(2, 640, 640, 3, 1, d, causal), persistent3(""));
      check_case(make(2, 700, 190, 2, 2, d, causal), persistent3(""));
    }
  for (const char *tile : {"128x176", "128x128"}) {
    check_case(make(3, 1000, 1000, 2, 2, 128, 0), persistent3(tile));
    check_case(make(3, 1000, 1000, 2, 2, 128, 1), persistent3(tile));
  }
  check_case(make(2, 900, 900, 2, 2, 64, 1), persistent3("128x128"));
}

// head_dim 64 runs persistent by default: the one-CTA-per-tile grid must stay correct too.
TEST_F(Sm90, GridScheduleHeadDim64) {
  RunOptions opt;
  opt.tuning.sm90_schedule = detail::Sm90Schedule::grid;
  for (int causal : {0, 1}) {
    check_case(make(2, 700, 700, 2, 2, 64, causal), opt);
    check_case(make(2, 300, 100, 2, 2, 64, causal), opt);
  }
}

// The persistent production shape: one CTA per SM, many tiles each (sections of several heads).
TEST_F(Sm90, PersistentAllSms) {
  RunOptions opt;
  opt.tuning.sm90_schedule = detail::Sm90Schedule::persistent;
  check_case(make(2, 1024, 1024, 16, 8, 64, 1), opt);    // 192 tiles of 192 rows
  check_case(make(2, 1000, 1000, 16, 16, 128, 0), opt);  // 256 tiles of 128 rows, own O buffer
  check_case(make(2, 1000, 1000, 16, 4, 128, 1), opt);   // 256 tiles, own O buffer
}

// options.sm_margin: the persistent grid leaves that many SMs free (SMs - margin CTAs walk every
// tile, here 3, so each walks many); a margin of the whole device is refused, naming the field.
TEST_F(Sm90, SmMargin) {
  int dev = 0, sms = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  RunOptions opt;
  opt.kernel.sm_margin = sms - 3;
  check_case(make(2, 1000, 1000, 4, 2, 128, 0), opt);
  check_case(make(2, 1024, 1024, 4, 2, 64, 1), opt);
  opt.kernel.sm_margin = sms;
  AttentionData d(make(1, 64, 64, 2, 2, 64, 0));
  int rc = -1;
  std::string message;
  ASSERT_NO_FATAL_FAILURE(run_on_gpu(d, opt, &rc, &message));
  EXPECT_EQ(rc, FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("options.sm_margin = " + std::to_string(sms)), std::string::npos) << message;
}

// What TMA cannot describe (and dtypes the kernel lacks) is refused with a reason, so that dispatch
// falls back to sm80; the API's own validation already rejects most such layouts for CUDA.
TEST_F(Sm90, PlanGivesReasons) {
  AttentionData d(make(1, 64, 64, 2, 2, 64, 0));
  flashbox_attention_args a = d.args;
  uint16_t *const dummy = plan_only_device_memory();
  ASSERT_NE(dummy, nullptr);
  a.q = a.k = a.v = dummy, a.o = dummy;
  detail::PlanResult r = detail::plan_sm90_forward(detail::make_problem(a));
  EXPECT_TRUE(r.plan.has_value()) << r.why_not;
  a.q = dummy + 1;
  r = detail::plan_sm90_forward(detail::make_problem(a));
  EXPECT_FALSE(r.plan.has_value());
  EXPECT_NE(r.why_not.find("16-byte"), std::string::npos) << r.why_not;
  a.q = dummy;
  a.head_dim = 100;  // not a multiple of 8 (the API refuses it before any family)
  r = detail::plan_sm90_forward(detail::make_problem(a));
  EXPECT_FALSE(r.plan.has_value());
  EXPECT_NE(r.why_not.find("multiples of 8 up to 256 (got 100)"), std::string::npos) << r.why_not;
}

// Every multiple of 8 up to 256 runs on the next instantiation up (64, 128, 192, 256): the tensor maps end
// at head_dim, so the TMA loads zeros past it and clips the store. The layout is PADDED: every head
// row of q, k, v and o has 8 guard columns after head_dim (then gaps after each seq row and batch);
// the inputs' guards hold NaN (a kernel that read them would give NaN) and O's must keep the poison.
// The served instantiation is in the kernel name.
std::string served_prefix(int64_t d) {
  return "cuda_flash_sm90_d" + std::to_string(d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256) + "_";
}

void nan_outside_elements(std::vector<uint8_t> &buf, const TensorShape &s, int64_t b, int64_t t, int64_t h, int64_t d) {
  std::vector<char> inside(size_t(s.elements), 0);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < t; ++j)
      for (int64_t k = 0; k < h; ++k) std::fill_n(inside.begin() + i * s.stride[0] + j * s.stride[1] + k * s.stride[2], d, 1);
  for (int64_t e = 0; e < s.elements; ++e)
    if (!inside[size_t(e)]) buf[size_t(2 * e)] = 0xff, buf[size_t(2 * e + 1)] = 0x7f;  // bf16/fp16 NaN
}

RunOptions nan_guards() {
  RunOptions opt;
  opt.prepare = [](AttentionData &d) {
    const AttentionCase &c = d.config();
    nan_outside_elements(d.q_bytes(), d.q_shape(), c.batch, c.seqlen_q, c.heads_q, c.head_dim);
    nan_outside_elements(d.k_bytes(), d.k_shape(), c.batch, c.seqlen_k, c.heads_kv, c.head_dim);
    nan_outside_elements(d.v_bytes(), d.v_shape(), c.batch, c.seqlen_k, c.heads_kv, c.head_dim);
  };
  return opt;
}

// prefix: the kernel name the case must run (default: served_prefix of its head_dim).
void check_served(const AttentionCase &c, RunOptions opt = nan_guards(), const std::string &prefix = "") {
  AttentionData d(c);
  if (opt.prepare) opt.prepare(d);
  int rc = -1;
  std::string kernel;
  ASSERT_NO_FATAL_FAILURE(run_on_gpu(d, opt, &rc, &kernel));
  ASSERT_EQ(rc, 0) << kernel << " | " << d.name();
  EXPECT_EQ(kernel.rfind(prefix.empty() ? served_prefix(c.head_dim) : prefix, 0), 0u)
      << "ran " << kernel << " | " << d.name();
  const Comparison r = d.compare(opt.with_lse);
  EXPECT_FALSE(r.has_nan) << d.name();
  EXPECT_LT(r.rel_error, 1e-2) << "max abs " << r.max_abs_error << " | " << d.name();
  if (opt.with_lse) {
    EXPECT_LT(r.lse_max_abs_error, 2e-3) << d.name();
  }
  EXPECT_TRUE(d.o_padding_untouched()) << "guard columns (or gaps) of O written | " << d.name();
  std::fprintf(stderr, "  %s: rel %.3e, LSE max abs %.3e, %s\n", d.name().c_str(), r.rel_error, r.lse_max_abs_error,
               kernel.c_str());
}

// 72..96: the head_dim 96 kernel; 136..192: the head_dim 192 kernel (128 x 112); 200..256 the 256 one.
constexpr int64_t kServedHeadDims[] = {8, 32, 40, 72, 80, 96, 120, 136, 160, 176, 192, 200, 224};

TEST_F(Sm90, HeadDimsOnTheNextInstantiation) {
  for (int64_t d : kServedHeadDims)
    for (int causal : {0, 1})
      for (int64_t t : {1, 17, 65, 1000}) {
        SCOPED_TRACE("d" + std::to_string(d) + " causal" + std::to_string(causal) + " t" + std::to_string(t));
        // GQA (4 query heads on 2 key heads); one batch entry at T = 1000 (the fp64 reference's time).
        check_served(make(t == 1000 ? 1 : 2, t, t, 4, 2, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED));
      }
}

TEST_F(Sm90, HeadDimsDifferentLengthsAndMultiQuery) {
  for (int64_t d : kServedHeadDims)
    for (int causal : {0, 1}) {
      SCOPED_TRACE("d" + std::to_string(d) + " causal" + std::to_string(causal));
      check_served(make(2, 100, 300, 2, 2, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED));
      check_served(make(2, 300, 100, 2, 2, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED));
      check_served(make(1, 17, 1000, 3, 1, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED));  // MQA
      check_served(make(2, 65, 1, 4, 2, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED));
    }
}

TEST_F(Sm90, HeadDimsFloat16DenseAndScale) {
  for (int64_t d : {32, 96, 192}) {
    check_served(make(2, 200, 200, 2, 2, d, 1, FLASHBOX_FLOAT16), RunOptions{});
    AttentionCase c = make(1, 300, 300, 2, 2, d, 0);
    c.softmax_scale = 0.3f;  // the call's scale, not 1/sqrt of the instantiation's head_dim
    check_served(c, RunOptions{});
    check_served(make(2, 150, 150, 4, 2, d, 1, FLASHBOX_BFLOAT16, Layout::BHTD), RunOptions{});
  }
}

// The other tiles and schedules of the instantiations, on a smaller head_dim: 128 x 128 of the 64
// kernel, 128 x 176 of the 128 kernel (no O buffer: O staged in the Q rows; at d96 the tile names
// the 128 kernel), the grid schedule, and persistent CTAs capped at 3 (rings, Q and O buffers
// carried over many tiles).
TEST_F(Sm90, HeadDimsOtherTilesAndSchedules) {
  const auto opts = [](const char *tile, detail::Sm90Schedule sched, int max_ctas) {
    RunOptions o = nan_guards();
    o.tuning = with_tile(tile).tuning;
    o.tuning.sm90_schedule = sched, o.tuning.sm90_max_ctas = max_ctas;
    return o;
  };
  for (int causal : {0, 1}) {
    check_served(make(2, 700, 700, 2, 2, 40, causal, FLASHBOX_BFLOAT16, Layout::PADDED), opts("128x128", detail::Sm90Schedule::policy, 0));
    check_served(make(2, 700, 700, 2, 2, 96, causal, FLASHBOX_BFLOAT16, Layout::PADDED), opts("128x176", detail::Sm90Schedule::policy, 0),
                 "cuda_flash_sm90_d128_128x176");
    check_served(make(2, 700, 300, 2, 1, 72, causal, FLASHBOX_BFLOAT16, Layout::PADDED), opts("", detail::Sm90Schedule::grid, 0));
    for (int64_t d : {32, 96, 160})
      check_served(make(2, 640, 640, 3, 1, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED),
                   opts("", detail::Sm90Schedule::persistent, 3));
  }
}

// The head_dim 192 kernel (128 x 112) on long and odd lengths: T = 4097 (37 key blocks of 112, the
// last one 65 keys; 33 query tiles, the last one row), causal and not, GQA, on the default schedule
// (persistent up to 4 MB of K/V per head) and the grid; and 136..192 with the tile 128 x 64, which
// names the head_dim 256 kernel (the path before the 192 kernel, kept for benchmarks).
TEST_F(Sm90, HeadDim192KernelLongAndOldPath) {
  const auto opts = [](const char *tile, detail::Sm90Schedule sched) {
    RunOptions o = nan_guards();
    o.tuning = with_tile(tile).tuning;
    o.tuning.sm90_schedule = sched;
    return o;
  };
  for (int causal : {0, 1}) {
    check_served(make(1, 4097, 4097, 2, 1, 192, causal, FLASHBOX_BFLOAT16, Layout::PADDED));
    check_served(make(1, 1000, 4097, 2, 1, 176, causal, FLASHBOX_BFLOAT16, Layout::PADDED),
                 opts("", detail::Sm90Schedule::grid));
    check_served(make(2, 333, 777, 4, 2, 136, causal, FLASHBOX_FLOAT16, Layout::PADDED),
                 opts("", detail::Sm90Schedule::persistent));
    for (int64_t d : {136, 192}) {
      AttentionData data(make(2, 65, 1000, 4, 2, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED));
      RunOptions o = opts("128x64", detail::Sm90Schedule::policy);
      o.prepare(data);
      int rc = -1;
      std::string kernel;
      ASSERT_NO_FATAL_FAILURE(run_on_gpu(data, o, &rc, &kernel));
      ASSERT_EQ(rc, 0) << kernel;
      EXPECT_EQ(kernel.rfind("cuda_flash_sm90_d256_128x64", 0), 0u) << kernel;
      const Comparison r = data.compare(true);
      EXPECT_FALSE(r.has_nan) << data.name();
      EXPECT_LT(r.rel_error, 1e-2) << data.name();
      EXPECT_TRUE(data.o_padding_untouched()) << data.name();
    }
  }
}

// The head_dim 96 kernel (128 x 128, Q in registers; V in three 32-column panels of 64B swizzle) at
// head_dims 72, 80 and 96: T = 1, 17, 63, 64, 65 (a query tile's and a key block's edges) and 1000,
// seqlen_q != seqlen_k both ways, GQA and MQA, causal and not, NaN in the inputs' guard columns and
// O's guards kept; T = 4097 on the default schedule and the grid; persistent CTAs capped at 2 (the
// rings and the O buffer carried over many tiles); fp16. Every case names the 96 kernel.
TEST_F(Sm90, HeadDim96Kernel) {
  const std::string want = "cuda_flash_sm90_d96_128x128_qreg";
  for (int64_t d : {72, 80, 96})
    for (int causal : {0, 1}) {
      SCOPED_TRACE("d" + std::to_string(d) + " causal" + std::to_string(causal));
      for (int64_t t : {1, 17, 63, 64, 65, 1000})
        check_served(make(t == 1000 ? 1 : 2, t, t, 4, 2, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED), nan_guards(), want);
      check_served(make(2, 100, 300, 4, 2, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED), nan_guards(), want);
      check_served(make(2, 300, 100, 4, 1, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED), nan_guards(), want);
      check_served(make(1, 17, 1000, 3, 1, d, causal, FLASHBOX_BFLOAT16, Layout::PADDED), nan_guards(), want);
      check_served(make(2, 200, 200, 2, 2, d, causal, FLASHBOX_FLOAT16), RunOptions{}, want);
    }
  const auto opts = [](detail::Sm90Schedule sched, int max_ctas) {
    RunOptions o = nan_guards();
    o.tuning.sm90_schedule = sched, o.tuning.sm90_max_ctas = max_ctas;
    return o;
  };
  for (int causal : {0, 1}) {
    check_served(make(1, 4097, 4097, 2, 1, 96, causal, FLASHBOX_BFLOAT16, Layout::PADDED), nan_guards(), want);
    check_served(make(1, 1000, 4097, 2, 1, 80, causal, FLASHBOX_BFLOAT16, Layout::PADDED),
                 opts(detail::Sm90Schedule::grid, 0), want);
    check_served(make(2, 777, 333, 4, 2, 72, causal, FLASHBOX_FLOAT16, Layout::PADDED),
                 opts(detail::Sm90Schedule::persistent, 2), want);
  }
}

// The plan's side: names and declines (no kernel runs).
TEST_F(Sm90, HeadDimsPlan) {
  for (int64_t d : kServedHeadDims) {
    AttentionData data(make(1, 64, 64, 2, 2, d, 0));
    flashbox_attention_args a = data.args;
    uint16_t *const dummy = plan_only_device_memory();
    ASSERT_NE(dummy, nullptr);
    a.q = a.k = a.v = dummy, a.o = dummy;
    const detail::PlanResult r = detail::plan_sm90_forward(detail::make_problem(a));
    ASSERT_TRUE(r.plan.has_value()) << "d" << d << ": " << r.why_not;
    EXPECT_EQ(r.plan->kernel.rfind(served_prefix(d), 0), 0u) << r.plan->kernel;
    if (d > 128 && d <= 192) EXPECT_EQ(r.plan->kernel.rfind("cuda_flash_sm90_d192_128x112", 0), 0u) << r.plan->kernel;
    if (d > 64 && d <= 96) EXPECT_EQ(r.plan->kernel.rfind("cuda_flash_sm90_d96_128x128_qreg", 0), 0u) << r.plan->kernel;
  }
  {  // the tiles of 136..192, in the reason for a tile it has not
    AttentionData data(make(1, 64, 64, 2, 2, 160, 0));
    flashbox_attention_args a = data.args;
    uint16_t *const dummy = plan_only_device_memory();
    ASSERT_NE(dummy, nullptr);
    a.q = a.k = a.v = dummy, a.o = dummy;
    detail::Problem pr = detail::make_problem(a);
    pr.tuning.overrides.sm90_tile_m = 128, pr.tuning.overrides.sm90_tile_n = 128;
    const detail::PlanResult r = detail::plan_sm90_forward(pr);
    EXPECT_FALSE(r.plan.has_value());
    EXPECT_NE(r.why_not.find("(128x112, 128x64)"), std::string::npos) << r.why_not;
  }
}

}  // namespace
}  // namespace flashbox::test::sm90_forward

#undef SKIP_WITHOUT_HOPPER
