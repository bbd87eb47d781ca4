// Whether the sm90 tests can run here: a CUDA device of compute capability 9.0 (the sm_90a kernels'
// only target), with the reason when not (for GTEST_SKIP).
#pragma once
#include <cuda_runtime.h>

#include <string>

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

}  // namespace flashbox::test
