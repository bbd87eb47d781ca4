// One cuBLAS handle per (thread, device), created on first use and kept for the life of the thread
// (cuBLAS handles are not thread-safe to share, and creating one costs milliseconds). Handles are
// deliberately never destroyed: destroying them from a thread_local destructor can run after the
// CUDA runtime has shut down at process exit.
#pragma once
#include <cublas_v2.h>

namespace flashbox::cuda {

// The calling thread's handle for the current device, or nullptr when cublasCreate fails
// (`status` then holds why).
cublasHandle_t cublas_handle_for_current_device(cublasStatus_t *status);

}  // namespace flashbox::cuda
