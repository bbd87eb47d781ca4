// Shared by the sm90 test files: whether they can run here (a CUDA device of compute capability 9.0,
// the sm_90a kernels' only target, with the reason when not, for GTEST_SKIP), CUDA_OK for a checked
// call, the guard byte around every device output that shows a write out of bounds (the buffers
// themselves: support/device_buffers.hpp), a packed output's relative error, and the forward tests'
// seeded inputs and O and LSE check.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"

#include "support/device_buffers.hpp"
#include "support/gpu_check.hpp"  // CUDA_OK
#include "support/output_error.hpp"

namespace flashbox::test {

inline bool have_hopper(std::string &why) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    why = "no CUDA device";
    return false;
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (major != 9 || minor != 0) {
    why = "device is compute capability " + std::to_string(major) + "." + std::to_string(minor) + ", not 9.0";
    return false;
  }
  return true;
}

// Device memory that plan-only tests point Q, K, V and O at: the sm90 plan encodes TMA tensor maps,
// and the driver refuses a host address for them. Nothing reads or writes it (1 MiB holds every
// plan-only shape's tensors: at most 1 x 64 x 2 x 256 bf16). Null when the allocation fails.
inline uint16_t *plan_only_device_memory() {
  static void *const p = [] {
    void *q = nullptr;
    return cudaMalloc(&q, size_t(1) << 20) == cudaSuccess ? q : nullptr;
  }();
  return static_cast<uint16_t *>(p);
}

// The sm90 forward tests' device outputs are [kGuard bytes | payload | kGuard bytes]
// (support/device_buffers.hpp), the guards set to kGuardByte.
inline constexpr uint8_t kGuardByte = 0x5a;

// Whether both guards of such a buffer, copied back whole into `raw`, are intact.
inline bool guard_intact(const std::vector<uint8_t> &raw, size_t payload) {
  return guard_intact(raw, payload, kGuardByte);
}

// The sm90 tests' seeded inputs (the forward's and the varlen backward's): values of a 2-byte dtype
// (bf16, fp16) from N(0, 1), and ALiBi slopes from U(0, 0.3), all drawn from one generator in the
// order they are asked for, so that the seed in a failure message reproduces the case.
class Sm90Inputs {
 public:
  explicit Sm90Inputs(uint64_t seed) : rng_(seed) {}

  // n values of dtype dt (2 bytes each).
  std::vector<uint8_t> normal(flashbox_dtype dt, int64_t n) {
    std::vector<uint8_t> buf(size_t(n * 2));
    for (int64_t i = 0; i < n; ++i) cpu::store_from_float(buf.data(), dt, i, normal_(rng_));
    return buf;
  }

  // alibi 0: none (empty); 1: one slope per head; 2: a row of `stride` slopes per batch entry.
  std::vector<float> slopes(int alibi, int64_t batch, int64_t heads, int64_t stride) {
    std::vector<float> s;
    if (alibi) {
      std::uniform_real_distribution<float> u(0.f, 0.3f);
      s.resize(size_t(alibi == 2 ? batch * stride : heads));
      for (float &x : s) x = u(rng_);
    }
    return s;
  }

 private:
  std::mt19937_64 rng_;
  std::normal_distribution<float> normal_{0.f, 1.f};
};

// A packed output's relative error against its fp64 reference: got holds ref.size() values of dtype
// dt; ||got - ref|| / ||ref|| (ref all zero: ||got||), inf when got holds a NaN or inf.
inline double rel_error(const uint8_t *got, flashbox_dtype dt, const std::vector<double> &ref) {
  const RelError e = rel_error_of([&](size_t i) { return double(cpu::load_as_float(got, dt, int64_t(i))); }, ref);
  return e.nan ? INFINITY : e.rel;
}

// O's relative error (inf when O holds a NaN or inf) and the LSE's largest absolute error.
struct ForwardError {
  double rel, lse;
};

// The sm90 forward tests' check of O and LSE against the fp64 reference: no NaN or inf in O, rel
// error < 1e-2; the LSE equal to the reference where either is infinite or it is NaN (-inf: a row
// that sees no key) and within 2e-3 elsewhere. o_at(i) is O's i-th value in ref_o's layout.
template <class OAt>
ForwardError expect_forward_close(const OAt &o_at, const std::vector<double> &ref_o, const float *lse,
                                  const std::vector<double> &ref_lse) {
  const RelError eo = rel_error_of(o_at, ref_o);
  const double rel = eo.nan ? INFINITY : eo.rel;
  const LseError el = lse_error(lse, ref_lse, LseRule::equal_where_infinite);
  const double lse_err = el.max_abs;
  EXPECT_FALSE(eo.nan) << "NaN/inf in O";
  EXPECT_LT(rel, 1e-2);
  EXPECT_EQ(el.bad, 0) << "rows whose LSE disagrees on -inf or is NaN";
  EXPECT_LT(lse_err, 2e-3);
  return {rel, lse_err};
}

}  // namespace flashbox::test
