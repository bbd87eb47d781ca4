// Host helpers of the varlen bench programs (sm90_varlen_bench.cpp, sm90_bwd_varlen_bench.cpp): seeded
// bf16 inputs that are never zero, the median time of a call between CUDA events, a bf16 read back.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_check.hpp"

namespace flashbox::bench {

// Uniform in [-2, 2), bf16 (round to nearest even), from a seeded hash: never zeros.
inline void fill_random_bf16(uint16_t *dev, int64_t n, uint64_t seed) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t x = (uint64_t(i) + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    x ^= x >> 31, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 29;
    const float u = float(x >> 40) * (1.0f / 16777216.0f) * 4.f - 2.f;
    uint32_t bits;
    std::memcpy(&bits, &u, 4);
    h[size_t(i)] = uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
  CHECK_CUDA(cudaMemcpy(dev, h.data(), size_t(n) * 2, cudaMemcpyHostToDevice));
}

template <class F>
inline double median_ms(F &&f, int reps = 20) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    f();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

inline double bf16_to_double(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace flashbox::bench
