// The little CUDA runtime the experiments need (device buffers, event timing, device description),
// behind a header without CUDA types so that report code compiles in CPU-only builds too. In a build
// without CUDA, gpu_info() is empty and allocating a DeviceBuffer throws.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace flashbox::report {

struct GpuInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sms = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
};

// Device 0's description, or nothing when the build has no CUDA or no GPU is present.
std::optional<GpuInfo> gpu_info();

// A cudaMalloc that fails for lack of memory throws this, so a sweep can record "oom" and go on.
struct DeviceOutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // throws DeviceOutOfMemory or std::runtime_error
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer();

  void *get() const { return ptr_; }
  size_t size() const { return bytes_; }
  void upload(const void *host, size_t bytes);
  void download(void *host, size_t bytes) const;

 private:
  void *ptr_ = nullptr;
  size_t bytes_ = 0;
};

void device_synchronize();    // throws std::runtime_error on a CUDA error
int64_t device_free_bytes();  // cudaMemGetInfo's free bytes

// Times work on the default stream with CUDA events: start() before it, stop_ms() after it.
class GpuTimer {
 public:
  GpuTimer();
  ~GpuTimer();
  GpuTimer(const GpuTimer &) = delete;
  GpuTimer &operator=(const GpuTimer &) = delete;
  void start();
  double stop_ms();  // waits for the stop event

 private:
  // cudaEvent_t; unused in a build without CUDA (cuda_device.cpp's stubs), hence maybe_unused.
  [[maybe_unused]] void *start_ = nullptr;
  [[maybe_unused]] void *stop_ = nullptr;
};

}  // namespace flashbox::report
