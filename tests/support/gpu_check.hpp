// The GPU tests' two checks: SKIP_WITHOUT_GPU() skips a test, with the reason, where no CUDA device
// is visible (it asks the public API, so it compiles in every build, CUDA or not), and CUDA_OK(call)
// asserts that a CUDA runtime call succeeded, naming the call and its error (include
// <cuda_runtime.h> first: only CUDA builds have it).
#pragma once
#include <gtest/gtest.h>

#include "flashbox/flashbox.h"

namespace flashbox::test {

inline bool have_gpu() { return flashbox_cuda_device_count() > 0; }

}  // namespace flashbox::test

#define SKIP_WITHOUT_GPU() \
  do { \
    if (!::flashbox::test::have_gpu()) \
      GTEST_SKIP() << "no CUDA device (flashbox_cuda_device_count() == 0): GPU test not run"; \
  } while (0)

#define CUDA_OK(call) \
  do { \
    const cudaError_t e_ = (call); \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)
