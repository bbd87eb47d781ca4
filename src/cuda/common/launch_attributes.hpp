// Launch attributes that belong to a kernel, not to a call: set once per kernel and device instead of
// on every launch (cudaFuncSetAttribute is a driver round trip); and launch_kernel, a launch with the
// per-call attribute of programmatic dependent launch.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

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

// Launches Kernel<<<grid, block, smem, stream>>>(args...) through cudaLaunchKernelEx, with
// cudaLaunchAttributeProgrammaticStreamSerialization when `programmatic` (sm_90: the kernel may start
// before the previous one in the stream completed; it must grid_dependency_wait before touching that
// kernel's data, cuda/hopper/grid_dependency.cuh). Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          bool programmatic, Args &&...args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr, cfg.numAttrs = programmatic ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  const cudaError_t last = cudaGetLastError();  // clears the launch's error state either way
  return e != cudaSuccess ? e : last;
}

}  // namespace flashbox::cuda
