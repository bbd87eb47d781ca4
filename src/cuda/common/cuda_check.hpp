// Host-side error checks for CUDA runtime and cuBLAS calls inside a backend. Each macro turns a
// failure into `return fail(code, message)` (src/core/error.hpp), naming the call and the file:line,
// so a backend body reads as the sequence of calls it makes.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::cuda {

inline std::string cuda_error_text(cudaError_t e, const char *what, const char *file, int line) {
  return std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") at " + file + ":" +
         std::to_string(line);
}

inline std::string cublas_error_text(cublasStatus_t s, const char *what, const char *file, int line) {
  return std::string(what) + " failed: cuBLAS status " + std::to_string(int(s)) + " at " + file + ":" +
         std::to_string(line);
}

// Clears the sticky-free "last error" so the next call of this thread starts clean.
inline void clear_cuda_error() { (void)cudaGetLastError(); }

}  // namespace flashbox::cuda

// Returns FLASHBOX_ERR_CUDA from the enclosing function when `call` does not return cudaSuccess.
#define FLASHBOX_CUDA_TRY(call) \
  do { \
    const cudaError_t fb_err_ = (call); \
    if (fb_err_ != cudaSuccess) { \
      ::flashbox::cuda::clear_cuda_error(); \
      return ::flashbox::detail::fail(FLASHBOX_ERR_CUDA, \
                                      ::flashbox::cuda::cuda_error_text(fb_err_, #call, __FILE__, __LINE__)); \
    } \
  } while (0)

// After a kernel launch: a launch configuration error shows up in cudaGetLastError().
#define FLASHBOX_CUDA_CHECK_LAUNCH(kernel_name) FLASHBOX_CUDA_TRY(cudaGetLastError())

#define FLASHBOX_CUBLAS_TRY(call) \
  do { \
    const cublasStatus_t fb_st_ = (call); \
    if (fb_st_ != CUBLAS_STATUS_SUCCESS) { \
      return ::flashbox::detail::fail(FLASHBOX_ERR_CUDA, \
                                      ::flashbox::cuda::cublas_error_text(fb_st_, #call, __FILE__, __LINE__)); \
    } \
  } while (0)
