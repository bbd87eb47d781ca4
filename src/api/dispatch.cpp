// The one place that decides which implementation runs. Every exported forward call goes
// validate -> choose (device, impl, arch) -> backend, inside guarded_call so no exception crosses
// the C ABI and a failed call writes nothing and leaves the last successful call's introspection.
//   CPU:  auto -> blocked; naive; blocked; flash is not a CPU level.
//   CUDA: auto/flash -> the Hopper kernel on compute capability 9.x when built for sm_90a and it
//         supports the call, else the sm80 kernel; FLASHBOX_FLASH_ARCH=sm80|sm90 forces one.
//         naive -> cuBLAS + softmax; blocked is not a CUDA level.
#include <cstdlib>
#include <cstring>
#include <string>

#include "api/backends.hpp"
#include "api/call_state.hpp"
#include "api/error.hpp"
#include "api/guarded_call.hpp"
#include "api/validate.hpp"
#include "flashbox/flashbox.h"

#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flashbox::detail {
namespace {

int cpu_forward(const flashbox_attention_args &a) {
  switch (a.impl) {
    case FLASHBOX_NAIVE: return cpu_naive_forward(a);
    case FLASHBOX_AUTO:
    case FLASHBOX_BLOCKED: return cpu_blocked_forward(a);
    default: return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "impl = flash is not available on device = cpu");
  }
}

#ifdef FLASHBOX_HAVE_CUDA
// Compute capability of the current device as major * 10 + minor, or a failure code (negative).
int current_compute_capability(int &cc) {
  int dev = 0, major = 0, minor = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fail(FLASHBOX_ERR_CUDA, std::string("querying the device's compute capability: ") + cudaGetErrorString(err));
  }
  cc = major * 10 + minor;
  return FLASHBOX_OK;
}

int cuda_flash_forward(const flashbox_attention_args &a) {
  const char *env = std::getenv("FLASHBOX_FLASH_ARCH");
  const std::string forced = env ? env : "";
  if (!forced.empty() && forced != "sm80" && forced != "sm90")
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "FLASHBOX_FLASH_ARCH = " + forced + " must be sm80 or sm90 (or unset)");
  int cc = 0;
  if (int rc = current_compute_capability(cc)) return rc;
  if (cc < 80)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "impl = flash needs compute capability 8.0 or newer; this device is " +
                                                   std::to_string(cc / 10) + "." + std::to_string(cc % 10));
  const bool hopper = cc / 10 == 9;
  if (forced == "sm90" || (forced.empty() && hopper)) {
#ifdef FLASHBOX_HAVE_SM90
    const char *why = "";
    if (!hopper) why = "the device is not compute capability 9.x";
    else if (cuda_flash_sm90_supports(a, &why)) return cuda_flash_forward_sm90(a);
    if (forced == "sm90")
      return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                  std::string("FLASHBOX_FLASH_ARCH = sm90, but the sm90 kernel cannot run this call: ") + why);
#else
    if (forced == "sm90")
      return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "FLASHBOX_FLASH_ARCH = sm90, but this flashbox was built without "
                                                 "sm_90a (FLASHBOX_CUDA_ARCHS)");
#endif
  }
  return cuda_flash_forward_sm80(a);
}

int cuda_forward(const flashbox_attention_args &a) {
  switch (a.impl) {
    case FLASHBOX_NAIVE: return cuda_naive_forward(a);
    case FLASHBOX_AUTO:
    case FLASHBOX_FLASH: return cuda_flash_forward(a);
    default: return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "impl = blocked is not available on device = cuda");
  }
}
#endif

}  // namespace
}  // namespace flashbox::detail

using namespace flashbox::detail;

extern "C" {

FLASHBOX_API int flashbox_attention_forward(const flashbox_attention_args *args) {
  return guarded_call("flashbox_attention_forward", [&]() -> int {
    if (int rc = validate_forward_args(args)) return rc;
#ifdef FLASHBOX_HAVE_CUDA
    if (args->device == FLASHBOX_CUDA) return cuda_forward(*args);
#endif
    return cpu_forward(*args);
  });
}

FLASHBOX_API const char *flashbox_last_error(void) { return last_error(); }

FLASHBOX_API const char *flashbox_version(void) { return FLASHBOX_VERSION_STRING; }

FLASHBOX_API int flashbox_cuda_device_count(void) {
#ifdef FLASHBOX_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

FLASHBOX_API const char *flashbox_impl_name(flashbox_impl impl) {
  // A C caller may pass any int; read as the C++ enum, a value outside it is undefined behaviour.
  int value;
  std::memcpy(&value, &impl, sizeof value);
  switch (value) {
    case FLASHBOX_AUTO: return "auto";
    case FLASHBOX_NAIVE: return "naive";
    case FLASHBOX_BLOCKED: return "blocked";
    case FLASHBOX_FLASH: return "flash";
  }
  return "unknown";
}

FLASHBOX_API int64_t flashbox_last_scratch_peak_bytes(void) { return scratch_peak_bytes(); }

FLASHBOX_API const char *flashbox_last_kernel(void) { return kernel_name(); }

}  // extern "C"
