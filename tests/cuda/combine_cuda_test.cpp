// flashbox_attention_combine on device = cuda (FlashAttention-3's flash_attn_combine): random partial
// outputs and LSEs (seed printed; parts of some rows -inf with NaN outputs, which must not be read;
// outliers of +-30 in the LSEs) in FlashAttention-3's strided layouts (out_partial [split, batch,
// token, head, dv] with token and head swapped in memory, lse_partial with the token stride 1),
// combined on the GPU into fp32, fp16 and bf16 outputs framed by guard bytes, against an fp64 combine
// on the host: fp32 relative error < 1e-5, 16-bit < 1e-2, LSE within 1e-5 (relative, floor 1);
// rows whose parts are all -inf give O = 0 and LSE = -inf. Splits 1 to 133, head_dim_v 8 to 512.
// Skipped, with the reason, where there is no GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "flashbox/flashbox.h"
#include "support/gpu_check.hpp"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr size_t kGuard = 256;
constexpr uint8_t kGuardByte = 0x7b;

struct Shape {
  int64_t S, B, T, H, DV;
};

// Device memory with guard bytes on both sides of `bytes`.
struct Guarded {
  explicit Guarded(size_t n) : bytes(n) {
    if (cudaMalloc(&raw, n + 2 * kGuard) != cudaSuccess) raw = nullptr;
  }
  ~Guarded() {
    if (raw) cudaFree(raw);
  }
  void *ptr() const { return static_cast<uint8_t *>(raw) + kGuard; }
  size_t bytes;
  void *raw = nullptr;
};

void run_case(const Shape &s, flashbox_dtype out_dtype, uint32_t seed) {
  SCOPED_TRACE("S " + std::to_string(s.S) + " B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " H " +
               std::to_string(s.H) + " DV " + std::to_string(s.DV) + " out " + flashbox::cpu::dtype_name(out_dtype) +
               " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  // out_partial allocated [S, B, H, T, DV] and viewed [S, B, T, H, DV]; lse_partial allocated
  // [S, B, H, T] and viewed [S, B, T, H] (token stride 1), as FlashAttention-3's test makes them.
  const int64_t ps[4] = {s.B * s.H * s.T * s.DV, s.H * s.T * s.DV, s.DV, s.T * s.DV};
  const int64_t ls[4] = {s.B * s.H * s.T, s.H * s.T, 1, s.T};
  std::vector<float> op(size_t(s.S * ps[0])), lp(size_t(s.S * ls[0]));
  for (float &x : op) x = normal(rng);
  for (float &x : lp) x = normal(rng) * (rng() % 50 == 0 ? 30.0f : 2.0f);
  // Batch entry 0: parts from S / 2 on saw no key (all of them when S == 1), their outputs NaN.
  for (int64_t sp = s.S / 2; sp < s.S; ++sp)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.H; ++h) {
        lp[size_t(sp * ls[0] + t * ls[2] + h * ls[3])] = -kInf;
        for (int64_t x = 0; x < s.DV; ++x)
          op[size_t(sp * ps[0] + t * ps[2] + h * ps[3] + x)] = std::numeric_limits<float>::quiet_NaN();
      }
  // The fp64 combine on the host.
  const int64_t rows = s.B * s.T * s.H;
  std::vector<double> want_o(size_t(rows * s.DV), 0.0), want_lse(size_t(rows), -INFINITY);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t base_l = b * ls[1] + t * ls[2] + h * ls[3], base_o = b * ps[1] + t * ps[2] + h * ps[3];
        double m = -INFINITY;
        for (int64_t sp = 0; sp < s.S; ++sp) m = std::max(m, double(lp[size_t(sp * ls[0] + base_l)]));
        if (m == -INFINITY) continue;
        double sum = 0;
        for (int64_t sp = 0; sp < s.S; ++sp) sum += std::exp(double(lp[size_t(sp * ls[0] + base_l)]) - m);
        const double lse = m + std::log(sum);
        const int64_t row = (b * s.T + t) * s.H + h;
        want_lse[size_t((b * s.H + h) * s.T + t)] = lse;
        for (int64_t sp = 0; sp < s.S; ++sp) {
          const double l = lp[size_t(sp * ls[0] + base_l)];
          if (l == -INFINITY) continue;
          for (int64_t x = 0; x < s.DV; ++x)
            want_o[size_t(row * s.DV + x)] += std::exp(l - lse) * op[size_t(sp * ps[0] + base_o + x)];
        }
      }
  const int64_t es = flashbox::cpu::dtype_size(out_dtype);
  Guarded d_op(op.size() * 4), d_lp(lp.size() * 4), d_o(size_t(rows * s.DV * es)), d_lse(size_t(rows) * 4);
  ASSERT_TRUE(d_op.raw && d_lp.raw && d_o.raw && d_lse.raw) << "cudaMalloc failed";
  CUDA_OK(cudaMemcpy(d_op.ptr(), op.data(), d_op.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_lp.ptr(), lp.data(), d_lp.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_o.raw, kGuardByte, d_o.bytes + 2 * kGuard));  // poison and guards
  CUDA_OK(cudaMemset(d_lse.raw, kGuardByte, d_lse.bytes + 2 * kGuard));
  flashbox_combine_args a{};
  a.struct_size = int32_t(sizeof a), a.device = FLASHBOX_CUDA, a.out_dtype = out_dtype;
  a.num_splits = s.S, a.batch = s.B, a.seqlen = s.T, a.heads = s.H, a.head_dim_v = s.DV;
  a.out_partial = static_cast<const float *>(d_op.ptr()), a.lse_partial = static_cast<const float *>(d_lp.ptr());
  std::memcpy(a.out_partial_stride, ps, sizeof ps), std::memcpy(a.lse_partial_stride, ls, sizeof ls);
  a.out = d_o.ptr(), a.lse = static_cast<float *>(d_lse.ptr());
  a.out_stride[0] = s.T * s.H * s.DV, a.out_stride[1] = s.H * s.DV, a.out_stride[2] = s.DV;
  ASSERT_EQ(flashbox_attention_combine(&a), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_STREQ(flashbox_last_kernel(), "cuda_combine");
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> o_raw(d_o.bytes + 2 * kGuard), lse_raw(d_lse.bytes + 2 * kGuard);
  CUDA_OK(cudaMemcpy(o_raw.data(), d_o.raw, o_raw.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(lse_raw.data(), d_lse.raw, lse_raw.size(), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(o_raw[i], kGuardByte) << "write before out";
    ASSERT_EQ(o_raw[kGuard + d_o.bytes + i], kGuardByte) << "write after out";
    ASSERT_EQ(lse_raw[i], kGuardByte) << "write before lse";
    ASSERT_EQ(lse_raw[kGuard + d_lse.bytes + i], kGuardByte) << "write after lse";
  }
  double err2 = 0, ref2 = 0;
  int64_t empty_rows = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (s.T * s.H), t = (r / s.H) % s.T, h = r % s.H;
    float lse_got;
    std::memcpy(&lse_got, lse_raw.data() + kGuard + size_t((b * s.H + h) * s.T + t) * 4, 4);
    const double lse_want = want_lse[size_t((b * s.H + h) * s.T + t)];
    for (int64_t x = 0; x < s.DV; ++x) {
      const double got = flashbox::cpu::load_as_float(o_raw.data() + kGuard, out_dtype, r * s.DV + x);
      ASSERT_FALSE(std::isnan(got)) << "row " << r << " column " << x;
      const double want = want_o[size_t(r * s.DV + x)];
      if (lse_want == -INFINITY) ASSERT_EQ(got, 0.0) << "row " << r << " saw no key";
      err2 += (got - want) * (got - want), ref2 += want * want;
    }
    if (lse_want == -INFINITY) {
      ++empty_rows;
      ASSERT_EQ(lse_got, -kInf) << "row " << r;
    } else {
      ASSERT_LE(std::abs(lse_got - lse_want), 1e-5 * std::max(1.0, std::abs(lse_want))) << "row " << r;
    }
  }
  EXPECT_EQ(empty_rows > 0, s.S == 1);
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  EXPECT_LT(rel, out_dtype == FLASHBOX_FLOAT32 ? 1e-5 : 1e-2);
}

TEST(CombineCuda, MatchesTheFp64Combine) {
  SKIP_WITHOUT_GPU();
  const uint32_t seed = std::random_device{}();
  std::printf("CombineCuda seed %u\n", seed);
  const Shape shapes[] = {{1, 2, 3, 4, 8}, {3, 2, 17, 4, 64}, {17, 1, 5, 3, 200},
                          {133, 1, 2, 2, 512}, {2, 3, 1, 16, 96}, {5, 2, 65, 8, 128}};
  uint32_t k = 0;
  for (const Shape &s : shapes)
    for (flashbox_dtype t : {FLASHBOX_FLOAT32, FLASHBOX_FLOAT16, FLASHBOX_BFLOAT16}) run_case(s, t, seed + k++);
}

TEST(CombineCuda, HostPointersAreRefused) {
  SKIP_WITHOUT_GPU();
  std::vector<float> op(2 * 4 * 8, 1.0f), lp(2 * 4, 0.0f), o(4 * 8, -1.0f), lse(4, -1.0f);
  flashbox_combine_args a{};
  a.struct_size = int32_t(sizeof a), a.device = FLASHBOX_CUDA, a.out_dtype = FLASHBOX_FLOAT32;
  a.num_splits = 2, a.batch = 1, a.seqlen = 4, a.heads = 1, a.head_dim_v = 8;
  a.out_partial = op.data(), a.lse_partial = lp.data(), a.out = o.data(), a.lse = lse.data();
  const int64_t ps[4] = {32, 32, 8, 8}, ls[4] = {4, 4, 1, 1};
  std::memcpy(a.out_partial_stride, ps, sizeof ps), std::memcpy(a.lse_partial_stride, ls, sizeof ls);
  a.out_stride[0] = 32, a.out_stride[1] = 8, a.out_stride[2] = 8;
  EXPECT_EQ(flashbox_attention_combine(&a), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("host memory"), std::string::npos) << flashbox_last_error();
  for (float x : o) EXPECT_EQ(x, -1.0f) << "out written";
  for (float x : lse) EXPECT_EQ(x, -1.0f) << "lse written";
}

}  // namespace
