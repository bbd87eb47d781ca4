#include "cuda/common/cublas_handle.hpp"

#include <cuda_runtime.h>

#include <unordered_map>

namespace flashbox::cuda {

cublasHandle_t cublas_handle_for_current_device(cublasStatus_t *status) {
  thread_local std::unordered_map<int, cublasHandle_t> handles;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    *status = CUBLAS_STATUS_NOT_INITIALIZED;
    return nullptr;
  }
  auto it = handles.find(device);
  if (it != handles.end()) {
    *status = CUBLAS_STATUS_SUCCESS;
    return it->second;
  }
  cublasHandle_t h = nullptr;
  *status = cublasCreate(&h);
  if (*status != CUBLAS_STATUS_SUCCESS) return nullptr;
  handles.emplace(device, h);
  return h;
}

}  // namespace flashbox::cuda
