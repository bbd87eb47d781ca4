// Shared by the sm90 test files: whether they can run here (a CUDA device of compute capability 9.0,
// the sm_90a kernels' only target, with the reason when not, for GTEST_SKIP), CUDA_OK for a checked
// call, and the guard bytes around every device output that show a write out of bounds.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#define CUDA_OK(call) \
  do { \
    const cudaError_t e_ = (call); \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

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

// A device output is allocated as [kGuard bytes | payload | kGuard bytes], the guards set to kGuardByte.
inline constexpr size_t kGuard = 4096;
inline constexpr uint8_t kGuardByte = 0x5a;

// Whether both guards of such a buffer, copied back whole into `raw`, are intact.
inline bool guard_intact(const std::vector<uint8_t> &raw, size_t payload) {
  for (size_t i = 0; i < kGuard; ++i)
    if (raw[i] != kGuardByte || raw[kGuard + payload + i] != kGuardByte) return false;
  return true;
}

}  // namespace flashbox::test
