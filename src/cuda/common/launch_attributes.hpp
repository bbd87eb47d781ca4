// Launch attributes that belong to a kernel, not to a call: set once per kernel and device instead of
// on every launch (cudaFuncSetAttribute is a driver round trip).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace flashbox::cuda {

// Raises `Kernel`'s dynamic shared memory limit to `bytes` on the current device, the first time it is
// asked for on that device (one bit per device ordinal; ordinals >= 64 set it every time).
template <auto Kernel>
cudaError_t set_max_dynamic_smem_once(int bytes) {
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess && bit != 0) done.fetch_or(bit, std::memory_order_release);
  return e;
}

}  // namespace flashbox::cuda
