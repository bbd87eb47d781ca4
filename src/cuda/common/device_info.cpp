// How many CUDA devices this process can use; 0 when the driver or the GPU is missing.
#include <cuda_runtime.h>

#include "core/backends.hpp"

namespace flashbox::detail {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return 0;
  }
  return n;
}

}  // namespace flashbox::detail
