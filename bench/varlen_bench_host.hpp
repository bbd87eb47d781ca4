// Host helpers of the varlen bench programs (sm90_varlen_bench.cpp, sm90_bwd_varlen_bench.cpp): their
// command line, the --lens list and its cu_seqlens on the device, the packed batch's args and varlen
// Problem, seeded bf16 inputs that are never zero, the median time of a call between CUDA events, the
// fixed-length calls' timing, the FLOP count, bf16 outputs read back and compared, the table and the
// JSON file.
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

#include "core/problem.hpp"
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

// The command line of both: [--json PATH] [--lens a,b,...] [--heads H], and `flag` (if not null)
// setting *flag_set. False (after printing `usage`) on anything else.
struct BenchArgs {
  std::vector<int> lens;  // the program's default until --lens
  int64_t heads = 16;
  const char *json = nullptr;
  bool flag_set = false;
};
inline bool parse_bench_args(int argc, char **argv, BenchArgs &b, const char *usage, const char *flag = nullptr) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      b.json = argv[++i];
    } else if (!std::strcmp(argv[i], "--heads") && i + 1 < argc) {
      b.heads = std::atoll(argv[++i]);
    } else if (flag && !std::strcmp(argv[i], flag)) {
      b.flag_set = true;
    } else if (!std::strcmp(argv[i], "--lens") && i + 1 < argc) {
      b.lens = parse_lens(argv[++i]);
    } else {
      std::fprintf(stderr, "%s\n", usage);
      return false;
    }
  }
  return true;
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

// The whole batch as the C API's extension passes it to a plan: a [1, total, heads, d] view of the
// packed bf16 tensors (O and LSE: the caller's), flash impl; then (varlen_problem) its Problem with
// the sequences (src/api/ext_api.cpp, add_ext).
inline flashbox_attention_args packed_view(const CuSeqlens &cus, int64_t heads, int64_t d, int causal, const void *q,
                                           const void *k, const void *v) {
  const int64_t total = cus.total;
  flashbox_attention_args a{};
  a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_BFLOAT16, a.impl = FLASHBOX_FLASH;
  a.batch = 1, a.seqlen_q = a.seqlen_k = total, a.heads_q = a.heads_kv = heads, a.head_dim = d;
  for (int64_t *s : {a.q_stride, a.k_stride, a.v_stride, a.o_stride})
    s[0] = total * heads * d, s[1] = heads * d, s[2] = d;
  a.q = q, a.k = k, a.v = v, a.causal = causal;
  return a;
}
inline void set_sequences(detail::Problem &p, const CuSeqlens &cus, int64_t nseq) {
  p.batch = nseq, p.cu_seqlens_q = p.cu_seqlens_k = cus.dev, p.max_seqlen_q = p.max_seqlen_k = cus.max_len;
}

// Sum over sequences of `products` (4: the forward's two products; 10: the backward's five) * H * L^2 * D
// FLOPs, halved for causal.
inline double varlen_flop(const std::vector<int> &lens, int64_t heads, int64_t d, int causal, double products) {
  double flop = 0;
  for (int l : lens) flop += products * heads * double(l) * l * d / (causal ? 2.0 : 1.0);
  return flop;
}

// The table both print: its header, and the kernels of a row.
inline void print_table_header() {
  std::printf("%-5s %-7s %12s %12s %12s %12s %10s %10s %10s %s\n", "D", "mask", "sm90 ms", "sm80 ms", "fixed sum",
              "fixed loop", "sm90 TF/s", "vs sum", "vs sm80", "max|sm90-sm80|");
}
inline void print_kernels(const std::string &sm90, const std::string &sm80, const std::string &fixed) {
  std::printf("      sm90: %s\n      sm80: %s\n      fixed: %s\n", sm90.c_str(), sm80.c_str(), fixed.c_str());
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

// The fixed-length calls, one per sequence (call(args) of each of `per`): the sum of their medians,
// the median of all back to back, and the kernels that ran (each once if `distinct`, else one name
// per call).
struct FixedTimes {
  double sum = 0, loop = 0;
  std::string kernels;
};
template <class Args, class Call>
FixedTimes time_fixed(const std::vector<Args> &per, Call &&call, bool distinct) {
  FixedTimes t;
  for (const Args &f : per) {
    t.sum += median_ms_ok("fixed", [&] { return call(&f); });
    const std::string kn = flashbox_last_kernel();
    if (!distinct || t.kernels.find(kn) == std::string::npos) t.kernels += (t.kernels.empty() ? "" : " ") + kn;
  }
  t.loop = median_ms_ok("fixed loop", [&] {
    for (const Args &f : per)
      if (const int rc = call(&f)) return rc;
    return 0;
  });
  return t;
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
