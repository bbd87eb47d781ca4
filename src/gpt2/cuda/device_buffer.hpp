// One cudaMalloc allocation owned by the GPT-2 forward and trainer (moved, never copied). Running out
// of device memory is a Gpt2Error naming the size; kZeroed clears the bytes once (the trainer's
// buffers start at zero, the forward's are written before they are read).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "gpt2/cuda/cuda_check.hpp"

namespace flashbox::gpt2 {

class DeviceBuffer {
 public:
  enum Fill { kUninitialized, kZeroed };

  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, Fill fill = kUninitialized) {
    if (bytes && cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      cudaGetLastError();
      throw Gpt2Error("CUDA: out of device memory allocating " + std::to_string(bytes >> 20) + " MiB for GPT-2");
    }
    if (bytes && fill == kZeroed) GPT2_CUDA(cudaMemset(ptr_, 0, bytes));
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(DeviceBuffer &&o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  template <class T>
  T *as() const {
    return static_cast<T *>(ptr_);
  }

 private:
  void *ptr_ = nullptr;
};

}  // namespace flashbox::gpt2
