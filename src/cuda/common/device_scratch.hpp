// Scratch device memory for one backend call: allocated stream-ordered (cudaMallocAsync), recorded
// with note_scratch_alloc/free so flashbox_last_scratch_peak_bytes() reports what was really taken,
// and released by the destructor on every path out of the call, error paths included.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/call_state.hpp"

namespace flashbox::cuda {

class DeviceScratch {
 public:
  explicit DeviceScratch(cudaStream_t stream) : stream_(stream) {}
  DeviceScratch(const DeviceScratch &) = delete;
  DeviceScratch &operator=(const DeviceScratch &) = delete;
  ~DeviceScratch() { release(); }

  // Allocates `bytes`; returns the CUDA error (cudaErrorMemoryAllocation when it does not fit),
  // having cleared the thread's last-error state so later calls start clean.
  cudaError_t allocate(int64_t bytes) {
    release();
    void *p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, size_t(bytes), stream_);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return e;
    }
    ptr_ = p;
    bytes_ = bytes;
    detail::note_scratch_alloc(bytes);
    return cudaSuccess;
  }

  void release() {
    if (ptr_ == nullptr) return;
    if (cudaFreeAsync(ptr_, stream_) != cudaSuccess) (void)cudaGetLastError();
    detail::note_scratch_free(bytes_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  template <typename T>
  T *as() const {
    return static_cast<T *>(ptr_);
  }

 private:
  cudaStream_t stream_;
  void *ptr_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace flashbox::cuda
