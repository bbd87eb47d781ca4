// The CUDA merge and copy kernels (src/context_parallel/cuda_ops.cu) against their host loops, on
// strided rows with empty (-inf) rows of either part and of both, fp32 and bf16 partial O; the
// copy kernel's conversions, fill and fp32 accumulation. Skipped without a GPU, with the reason.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "context_parallel/cp_error.hpp"
#include "context_parallel/device_ops.hpp"
#include "cuda/device_attention.hpp"
#include "support/attention_case.hpp"  // the dtype conversions of the test support

namespace flashbox::cp {
namespace {

template <typename T>
T *to_device(const std::vector<T> &h) {
  T *d = nullptr;
  if (cudaMalloc(&d, h.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <typename T>
std::vector<T> to_host(const T *d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

TEST(GpuKernels, MergeEqualsHost) {
  SKIP_WITHOUT_GPU();
  auto ops = make_cuda_ops();
  ASSERT_TRUE(ops);
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  const float inf = std::numeric_limits<float>::infinity();
  for (flashbox_dtype part_dtype : {FLASHBOX_FLOAT32, FLASHBOX_BFLOAT16})
    for (int64_t D : {64, 128, 40}) {
      const int64_t B = 2, H = 3, T = 37;
      // O rows (b, h, t) at BTHD offsets with a padded head stride; LSE [B, H, T].
      const int64_t hs = D + 8, os[3] = {T * H * hs, hs, H * hs}, ls[3] = {H * T, T, 1};
      const size_t on = size_t(B * T * H * hs), ln = size_t(B * H * T);
      std::vector<float> acc_o(on), acc_l(ln), part_f(on), part_l(ln);
      for (auto &x : acc_o) x = normal(rng);
      for (auto &x : part_f) x = normal(rng);
      for (size_t i = 0; i < ln; ++i) {
        acc_l[i] = 3 * normal(rng), part_l[i] = 3 * normal(rng);
        if (i % 7 == 0) acc_l[i] = -inf;
        if (i % 5 == 0) part_l[i] = -inf;
      }
      std::vector<uint16_t> part_b(on);
      for (size_t i = 0; i < on; ++i) part_b[i] = cpu::float_to_bf16(part_f[i]);
      if (part_dtype == FLASHBOX_BFLOAT16)
        for (size_t i = 0; i < on; ++i) part_f[i] = cpu::bf16_to_float(part_b[i]);
      MergeArgs m;
      m.n[0] = B, m.n[1] = H, m.n[2] = T, m.head_dim = D, m.part_dtype = part_dtype;
      for (int i = 0; i < 3; ++i)
        m.acc_o_stride[i] = m.part_o_stride[i] = os[i], m.acc_lse_stride[i] = m.part_lse_stride[i] = ls[i];
      MergeArgs dev = m;
      dev.acc_o = to_device(acc_o), dev.acc_lse = to_device(acc_l), dev.part_lse = to_device(part_l);
      dev.part_o = part_dtype == FLASHBOX_BFLOAT16 ? static_cast<const void *>(to_device(part_b)) : to_device(part_f);
      ASSERT_EQ(ops->merge(dev, nullptr), 0) << last_error_message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      m.acc_o = acc_o.data(), m.acc_lse = acc_l.data(), m.part_lse = part_l.data();
      m.part_o = part_dtype == FLASHBOX_BFLOAT16 ? static_cast<const void *>(part_b.data()) : part_f.data();
      merge_host(m);
      const std::vector<float> got_o = to_host(dev.acc_o, on), got_l = to_host(dev.acc_lse, ln);
      double max_o = 0, max_l = 0;
      int both_empty = 0;
      for (size_t i = 0; i < on; ++i) max_o = std::max(max_o, double(std::abs(got_o[i] - acc_o[i])));
      for (size_t i = 0; i < ln; ++i) {
        if (std::isinf(acc_l[i])) {
          EXPECT_EQ(got_l[i], acc_l[i]) << "row " << i;
          ++both_empty;
        } else {
          max_l = std::max(max_l, double(std::abs(got_l[i] - acc_l[i])));
        }
      }
      EXPECT_LT(max_o, 1e-5) << "seed " << seed << " D " << D;
      EXPECT_LT(max_l, 1e-5) << "seed " << seed << " D " << D;
      EXPECT_GT(both_empty, 0) << "the case has rows empty in both parts";
      cudaFree(dev.acc_o), cudaFree(dev.acc_lse);
      cudaFree(const_cast<float *>(dev.part_lse)), cudaFree(const_cast<void *>(dev.part_o));
    }
}

TEST(GpuKernels, CopyRowsEqualsHost) {
  SKIP_WITHOUT_GPU();
  auto ops = make_cuda_ops();
  ASSERT_TRUE(ops);
  std::mt19937_64 rng(test::fresh_seed());
  std::normal_distribution<float> normal(0, 1);
  const int64_t n0 = 2, n1 = 33, n2 = 3, w = 72;
  const int64_t ss[3] = {n1 * n2 * (w + 8), n2 * (w + 8), w + 8}, ds[3] = {n1 * n2 * w, n2 * w, w};
  const size_t sn = size_t(n0 * ss[0]), dn = size_t(n0 * ds[0]);
  for (auto [st, dt, acc] : {std::tuple{FLASHBOX_BFLOAT16, FLASHBOX_FLOAT32, true},
                             {FLASHBOX_FLOAT32, FLASHBOX_BFLOAT16, false},
                             {FLASHBOX_FLOAT16, FLASHBOX_FLOAT16, false},
                             {FLASHBOX_FLOAT32, FLASHBOX_FLOAT32, true}}) {
    std::vector<float> srcf(sn), dstf(dn);
    for (auto &x : srcf) x = normal(rng);
    for (auto &x : dstf) x = normal(rng);
    std::vector<uint8_t> src(sn * 4), dst(dn * 4);
    for (size_t i = 0; i < sn; ++i) cpu::store_from_float(src.data(), st, int64_t(i), srcf[i]);
    for (size_t i = 0; i < dn; ++i) cpu::store_from_float(dst.data(), dt, int64_t(i), dstf[i]);
    RowCopy c;
    c.n[0] = n0, c.n[1] = n1, c.n[2] = n2, c.width = w, c.src_dtype = st, c.dst_dtype = dt, c.accumulate = acc;
    for (int i = 0; i < 3; ++i) c.src_stride[i] = ss[i], c.dst_stride[i] = ds[i];
    RowCopy dev = c;
    dev.src = to_device(src);
    uint8_t *ddst = to_device(dst);
    dev.dst = ddst;
    ASSERT_EQ(ops->copy_rows(dev, nullptr), 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    c.src = src.data(), c.dst = dst.data();
    copy_rows_host(c);
    const std::vector<uint8_t> got = to_host(ddst, dst.size());
    double max = 0;
    for (size_t i = 0; i < dn; ++i)
      max = std::max(max, double(std::abs(cpu::load_as_float(got.data(), dt, int64_t(i)) -
                                          cpu::load_as_float(dst.data(), dt, int64_t(i)))));
    EXPECT_LT(max, 1e-6) << "src dtype " << st << " dst dtype " << dt;
    cudaFree(const_cast<void *>(dev.src));
    cudaFree(ddst);
  }
}

}  // namespace
}  // namespace flashbox::cp
