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

namespace flashbox::test {

#define CUDA_ASSERT(call) \
  do { \
    const cudaError_t e_ = (call); \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

inline bool have_gpu() { return flashbox_cuda_device_count() > 0; }

#define SKIP_WITHOUT_GPU() \
  do { \
    if (!::flashbox::test::have_gpu()) \
      GTEST_SKIP() << "no CUDA device (flashbox_cuda_device_count() == 0): GPU test not run"; \
  } while (0)

// Options that let the dispatcher choose ("") or force a kernel family ("sm80", "sm90").
inline flashbox_options family_options(const std::string &arch) {
  flashbox_options o;
  flashbox_options_init(&o);
  o.family = arch == "sm80" ? FLASHBOX_FAMILY_SM80 : arch == "sm90" ? FLASHBOX_FAMILY_SM90 : FLASHBOX_FAMILY_AUTO;
  return o;
}

constexpr size_t kGuardBytes = 4096;
constexpr uint8_t kGuardByte = 0xa5;

// Device copies of one case's tensors; o and lse sit between guard regions.
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
    CUDA_ASSERT(cudaMalloc(&q_, d_.q_bytes().size()));
    CUDA_ASSERT(cudaMalloc(&k_, d_.k_bytes().size()));
    CUDA_ASSERT(cudaMalloc(&v_, d_.v_bytes().size()));
    CUDA_ASSERT(cudaMalloc(&o_raw_, o_size_ + 2 * kGuardBytes));
    CUDA_ASSERT(cudaMalloc(&lse_raw_, lse_size_ + 2 * kGuardBytes));
    CUDA_ASSERT(cudaMemsetAsync(o_raw_, kGuardByte, o_size_ + 2 * kGuardBytes, stream));
    CUDA_ASSERT(cudaMemsetAsync(lse_raw_, kGuardByte, lse_size_ + 2 * kGuardBytes, stream));
    CUDA_ASSERT(cudaMemcpyAsync(q_, d_.q_bytes().data(), d_.q_bytes().size(), cudaMemcpyHostToDevice, stream));
    CUDA_ASSERT(cudaMemcpyAsync(k_, d_.k_bytes().data(), d_.k_bytes().size(), cudaMemcpyHostToDevice, stream));
    CUDA_ASSERT(cudaMemcpyAsync(v_, d_.v_bytes().data(), d_.v_bytes().size(), cudaMemcpyHostToDevice, stream));
    CUDA_ASSERT(cudaMemcpyAsync(o(), d_.o_bytes().data(), o_size_, cudaMemcpyHostToDevice, stream));
    CUDA_ASSERT(cudaMemcpyAsync(lse(), d_.lse.data(), lse_size_, cudaMemcpyHostToDevice, stream));
    args = d_.args;
    args.device = FLASHBOX_CUDA;
    args.q = q_, args.k = k_, args.v = v_, args.o = o(), args.lse = lse();
    args.stream = stream;
  }

  // Copies o and lse back (synchronising only `stream`) and checks that the guards are intact.
  void download() {
    std::vector<uint8_t> o_all(o_size_ + 2 * kGuardBytes), lse_all(lse_size_ + 2 * kGuardBytes);
    CUDA_ASSERT(cudaMemcpyAsync(o_all.data(), o_raw_, o_all.size(), cudaMemcpyDeviceToHost, stream_));
    CUDA_ASSERT(cudaMemcpyAsync(lse_all.data(), lse_raw_, lse_all.size(), cudaMemcpyDeviceToHost, stream_));
    CUDA_ASSERT(cudaStreamSynchronize(stream_));
    CUDA_ASSERT(cudaGetLastError());
    std::memcpy(d_.o_bytes().data(), o_all.data() + kGuardBytes, o_size_);
    std::memcpy(d_.lse.data(), lse_all.data() + kGuardBytes, lse_size_);
    guards_intact = true;
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (o_all[i] != kGuardByte || o_all[kGuardBytes + o_size_ + i] != kGuardByte) guards_intact = false;
      if (lse_all[i] != kGuardByte || lse_all[kGuardBytes + lse_size_ + i] != kGuardByte) guards_intact = false;
    }
  }

  flashbox_attention_args args{};
  bool guards_intact = false;

 private:
  void *o() { return static_cast<uint8_t *>(o_raw_) + kGuardBytes; }
  float *lse() { return reinterpret_cast<float *>(static_cast<uint8_t *>(lse_raw_) + kGuardBytes); }

  AttentionData &d_;
  cudaStream_t stream_ = nullptr;
  void *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *o_raw_ = nullptr, *lse_raw_ = nullptr;
  size_t o_size_ = 0, lse_size_ = 0;
};

}  // namespace flashbox::test
