// Host helpers of the varlen bench programs (sm90_varlen_bench.cpp, sm90_bwd_varlen_bench.cpp): the
// --lens list and its cu_seqlens on the device, seeded bf16 inputs that are never zero, the median
// time of a call between CUDA events, bf16 outputs read back and compared, the JSON file.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "flashbox/flashbox.h"

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

// "a,b,c" (--lens) as sequence lengths.
inline std::vector<int> parse_lens(char *s) {
  std::vector<int> lens;
  while (*s) {
    lens.push_back(int(std::strtol(s, &s, 10)));
    if (*s == ',') ++s;
  }
  return lens;
}

// A batch's cu_seqlens (the same for queries and keys), on the host and uploaded to the device.
struct CuSeqlens {
  std::vector<int32_t> host{0};
  int max_len = 0;
  int64_t total = 0;
  int32_t *dev = nullptr;
};
inline CuSeqlens upload_cu_seqlens(const std::vector<int> &lens) {
  CuSeqlens c;
  for (int l : lens) c.host.push_back(c.host.back() + l), c.max_len = std::max(c.max_len, l);
  c.total = c.host.back();
  CHECK_CUDA(cudaMalloc(&c.dev, c.host.size() * 4));
  CHECK_CUDA(cudaMemcpy(c.dev, c.host.data(), c.host.size() * 4, cudaMemcpyHostToDevice));
  return c;
}

// median_ms of a flashbox call (0 on success); any failure prints `what` and the library's message
// and ends the program.
template <class F>
inline double median_ms_ok(const char *what, F &&call) {
  return median_ms([&] {
    if (call() != 0) {
      std::fprintf(stderr, "%s: %s\n", what, flashbox_last_error());
      std::exit(1);
    }
  });
}

// n bf16 values copied back from the device.
inline std::vector<uint16_t> bf16_from_device(const uint16_t *dev, int64_t n) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  CHECK_CUDA(cudaMemcpy(h.data(), dev, size_t(n) * 2, cudaMemcpyDeviceToHost));
  return h;
}

// max |a - b| over two bf16 arrays of the same size; *nan |= some value of a is not finite.
inline double max_abs_diff(const std::vector<uint16_t> &a, const std::vector<uint16_t> &b, bool *nan) {
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = bf16_to_double(a[i]);
    *nan |= !std::isfinite(x);
    diff = std::max(diff, std::fabs(x - bf16_to_double(b[i])));
  }
  return diff;
}

// The lengths as "a,b,c" and the JSON file {"lengths": [...], "rows": ROWS}; false if it cannot be written.
inline std::string join_lens(const std::vector<int> &lens) {
  std::string l;
  for (int x : lens) l += (l.empty() ? "" : ",") + std::to_string(x);
  return l;
}
inline bool write_rows_json(const char *path, const std::string &lens, const std::string &rows) {
  FILE *f = std::fopen(path, "w");
  if (!f) return false;
  std::fprintf(f, "{\"lengths\": [%s], \"rows\": %s}", lens.c_str(), rows.c_str());
  std::fclose(f);
  return true;
}

}  // namespace flashbox::bench
