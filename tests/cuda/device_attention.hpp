// Runs one AttentionData case on the GPU through the public C API: inputs copied to device memory,
// outputs poisoned (NaN) and surrounded by guard bytes, results copied back into the AttentionData so
// that its compare() and o_padding_untouched() judge them. Guards catch writes before or after O/LSE.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flashbox/flashbox.h"
#include "support/attention_case.hpp"
#include "support/device_buffers.hpp"
#include "support/gpu_check.hpp"

namespace flashbox::test {

// Options that let the dispatcher choose ("") or force a kernel family ("sm80", "sm90").
inline flashbox_options family_options(const std::string &arch) {
  flashbox_options o;
  flashbox_options_init(&o);
  o.family = arch == "sm80" ? FLASHBOX_FAMILY_SM80 : arch == "sm90" ? FLASHBOX_FAMILY_SM90 : FLASHBOX_FAMILY_AUTO;
  return o;
}

// Device copies of one case's tensors; o and lse sit between guard regions of kGuard bytes
// (support/device_buffers.hpp), set to GuardedOutput::kGuardByte.
class DeviceAttention {
 public:
  explicit DeviceAttention(AttentionData &d) : d_(d) {}
  ~DeviceAttention() {
    for (void *p : {q_, k_, v_, o_raw_, lse_raw_})
      if (p) cudaFree(p);
  }

  // Uploads inputs and poisoned outputs; fills `args` with device pointers. `stream` may be null.
  void upload(cudaStream_t stream = nullptr) {
    stream_ = stream;
    o_size_ = d_.o_bytes().size();
    lse_size_ = d_.lse.size() * sizeof(float);
    CUDA_OK(cudaMalloc(&q_, d_.q_bytes().size()));
    CUDA_OK(cudaMalloc(&k_, d_.k_bytes().size()));
    CUDA_OK(cudaMalloc(&v_, d_.v_bytes().size()));
    CUDA_OK(cudaMalloc(&o_raw_, o_size_ + 2 * kGuard));
    CUDA_OK(cudaMalloc(&lse_raw_, lse_size_ + 2 * kGuard));
    CUDA_OK(cudaMemsetAsync(o_raw_, kGuardByte, o_size_ + 2 * kGuard, stream));
    CUDA_OK(cudaMemsetAsync(lse_raw_, kGuardByte, lse_size_ + 2 * kGuard, stream));
    CUDA_OK(cudaMemcpyAsync(q_, d_.q_bytes().data(), d_.q_bytes().size(), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(k_, d_.k_bytes().data(), d_.k_bytes().size(), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(v_, d_.v_bytes().data(), d_.v_bytes().size(), cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(o(), d_.o_bytes().data(), o_size_, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(lse(), d_.lse.data(), lse_size_, cudaMemcpyHostToDevice, stream));
    args = d_.args;
    args.device = FLASHBOX_CUDA;
    args.q = q_, args.k = k_, args.v = v_, args.o = o(), args.lse = lse();
    args.stream = stream;
  }

  // Copies o and lse back (synchronising only `stream`) and checks that the guards are intact.
  void download() {
    std::vector<uint8_t> o_all(o_size_ + 2 * kGuard), lse_all(lse_size_ + 2 * kGuard);
    CUDA_OK(cudaMemcpyAsync(o_all.data(), o_raw_, o_all.size(), cudaMemcpyDeviceToHost, stream_));
    CUDA_OK(cudaMemcpyAsync(lse_all.data(), lse_raw_, lse_all.size(), cudaMemcpyDeviceToHost, stream_));
    CUDA_OK(cudaStreamSynchronize(stream_));
    CUDA_OK(cudaGetLastError());
    std::memcpy(d_.o_bytes().data(), o_all.data() + kGuard, o_size_);
    std::memcpy(d_.lse.data(), lse_all.data() + kGuard, lse_size_);
    guards_intact = guard_intact(o_all, o_size_, kGuardByte) && guard_intact(lse_all, lse_size_, kGuardByte);
  }

  flashbox_attention_args args{};
  bool guards_intact = false;

 private:
  static constexpr uint8_t kGuardByte = GuardedOutput::kGuardByte;

  void *o() { return static_cast<uint8_t *>(o_raw_) + kGuard; }
  float *lse() { return reinterpret_cast<float *>(static_cast<uint8_t *>(lse_raw_) + kGuard); }

  AttentionData &d_;
  cudaStream_t stream_ = nullptr;
  void *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *o_raw_ = nullptr, *lse_raw_ = nullptr;
  size_t o_size_ = 0, lse_size_ = 0;
};

}  // namespace flashbox::test
