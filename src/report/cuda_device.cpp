#include "report/cuda_device.hpp"

#include "flashbox/flashbox.h"

#include <fmt/core.h>

#include <utility>

#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flashbox::report {

#ifdef FLASHBOX_HAVE_CUDA
namespace {

void check(cudaError_t status, const char *what) {
  if (status != cudaSuccess)
    throw std::runtime_error(fmt::format("{}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status)));
}

}  // namespace

std::optional<GpuInfo> gpu_info() {
  if (flashbox_cuda_device_count() <= 0) return std::nullopt;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  GpuInfo info;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sms = prop.multiProcessorCount;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.l2_bytes = prop.l2CacheSize;
  return info;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  const cudaError_t status = cudaMalloc(&ptr_, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but clear it so the next call starts clean
    ptr_ = nullptr;
    throw DeviceOutOfMemory(fmt::format("cudaMalloc of {} bytes: out of device memory", bytes));
  }
  check(status, "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

void DeviceBuffer::upload(const void *host, size_t bytes) {
  check(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

void DeviceBuffer::download(void *host, size_t bytes) const {
  check(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

void device_synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

int64_t device_free_bytes() {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return static_cast<int64_t>(free);
}

GpuTimer::GpuTimer() {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  start_ = a;
  stop_ = b;
}

GpuTimer::~GpuTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void GpuTimer::start() { check(cudaEventRecord(static_cast<cudaEvent_t>(start_), nullptr), "cudaEventRecord"); }

double GpuTimer::stop_ms() {
  check(cudaEventRecord(static_cast<cudaEvent_t>(stop_), nullptr), "cudaEventRecord");
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)),
        "cudaEventElapsedTime");
  return ms;
}

#else  // built without CUDA: nothing to describe, and nothing can be allocated

namespace {
[[noreturn]] void no_cuda() { throw std::runtime_error("this flashbox was built without CUDA"); }
}  // namespace

std::optional<GpuInfo> gpu_info() { return std::nullopt; }
DeviceBuffer::DeviceBuffer(size_t) { no_cuda(); }
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::upload(const void *, size_t) { no_cuda(); }
void DeviceBuffer::download(void *, size_t) const { no_cuda(); }
void device_synchronize() { no_cuda(); }
int64_t device_free_bytes() { no_cuda(); }
GpuTimer::GpuTimer() { no_cuda(); }
GpuTimer::~GpuTimer() = default;
void GpuTimer::start() { no_cuda(); }
double GpuTimer::stop_ms() { no_cuda(); }

#endif

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
  }
  return *this;
}

}  // namespace flashbox::report
