// Device buffers shared by the GPU tests of tests/cuda and tests/sm90 (they compile only in a CUDA
// build): an input copied to the device, a set of allocations freed together, and the guard bytes
// around a device output that show a write out of bounds. An output is allocated as
// [kGuard bytes | payload | kGuard bytes]; each test keeps the guard byte it has always used
// (GuardedOutput's 0xa5, hopper_device.hpp's 0x5a for the sm90 forward tests).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace flashbox::test {

// Bytes before and after every guarded device output.
inline constexpr size_t kGuard = 4096;

// Whether both guards of a guarded buffer, copied back whole into `raw`, still hold `guard_byte`.
inline bool guard_intact(const std::vector<uint8_t> &raw, size_t payload, uint8_t guard_byte) {
  for (size_t i = 0; i < kGuard; ++i)
    if (raw[i] != guard_byte || raw[kGuard + payload + i] != guard_byte) return false;
  return true;
}

// One device output with guards of kGuardByte; the payload poisoned with 0xff bytes (NaN in bf16,
// fp16 and fp32). `raw` is null when the allocation failed.
struct GuardedOutput {
  static constexpr uint8_t kGuardByte = 0xa5;

  explicit GuardedOutput(size_t bytes) : bytes(bytes) {
    if (cudaMalloc(&raw, bytes + 2 * kGuard) != cudaSuccess) raw = nullptr;
    if (raw) {
      cudaMemset(raw, kGuardByte, bytes + 2 * kGuard);
      cudaMemset(ptr(), 0xff, bytes);
    }
  }
  ~GuardedOutput() { cudaFree(raw); }
  GuardedOutput(const GuardedOutput &) = delete;
  GuardedOutput &operator=(const GuardedOutput &) = delete;

  void *ptr() const { return static_cast<char *>(raw) + kGuard; }

  // Copies the payload back into `host` (`bytes` bytes); false when a guard byte changed or the copy
  // failed.
  bool back(void *host) const {
    std::vector<uint8_t> all(bytes + 2 * kGuard);
    if (cudaMemcpy(all.data(), raw, all.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    std::memcpy(host, all.data() + kGuard, bytes);
    return guard_intact(all, bytes, kGuardByte);
  }
  // The same into a vector, resized to the payload.
  bool back(std::vector<uint8_t> &host) const {
    host.resize(bytes);
    return back(host.data());
  }

  size_t bytes;
  void *raw = nullptr;
};

// A device copy of `bytes` host bytes (16 bytes allocated for an empty one, so that `ptr` is a real
// address); `ptr` is null when the allocation failed.
struct DeviceInput {
  DeviceInput(const void *host, size_t bytes) {
    if (cudaMalloc(&ptr, bytes ? bytes : 16) == cudaSuccess && bytes)
      cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice);
  }
  ~DeviceInput() { cudaFree(ptr); }
  DeviceInput(const DeviceInput &) = delete;
  DeviceInput &operator=(const DeviceInput &) = delete;
  void *ptr = nullptr;
};

// Device allocations freed together when it goes out of scope (at least 16 bytes each).
struct DeviceMem {
  std::vector<void *> ptrs;
  DeviceMem() = default;
  DeviceMem(const DeviceMem &) = delete;
  DeviceMem &operator=(const DeviceMem &) = delete;
  // A new allocation of n bytes, or null when cudaMalloc failed.
  void *alloc(size_t n) {
    void *p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(n, 16)) != cudaSuccess) return nullptr;
    ptrs.push_back(p);
    return p;
  }
  ~DeviceMem() {
    for (void *p : ptrs) cudaFree(p);
  }
};

}  // namespace flashbox::test
