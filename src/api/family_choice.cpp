// See family_choice.hpp.
#ifdef FLASHBOX_HAVE_CUDA
#include "api/family_choice.hpp"

#include <cuda_runtime.h>

#include <string>

#include "core/call_state.hpp"
#include "core/error.hpp"

namespace flashbox::detail {

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

bool device_is_hopper() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major == 9;
}

int check_sm_margin(int sm_margin) {
  int dev = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fail(FLASHBOX_ERR_CUDA, std::string("querying the device's SM count: ") + cudaGetErrorString(err));
  }
  if (sm_margin >= sms)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "options.sm_margin = " + std::to_string(sm_margin) +
                                                   " must be below the device's SM count (" +
                                                   std::to_string(sms) + ")");
  return FLASHBOX_OK;
}

const char *sm90_not_built() { return "this flashbox was built without sm_90a (FLASHBOX_CUDA_ARCHS)"; }

int run_plan(Plan &plan) {
  (void)cudaGetLastError();  // a sticky error of an earlier unrelated call must not be blamed on this one
  if (int rc = plan.run()) return rc;
  set_kernel_name(std::move(plan.kernel));
  return FLASHBOX_OK;
}

int declined(flashbox_kernel_family family, const char *pass, const PlanResult &r) {
  const char *name = family == FLASHBOX_FAMILY_SM90 ? "sm90" : "sm80";
  if (r.code != 0) return fail(r.code, r.why_not);
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, std::string("kernel family ") + name + " was asked for, but the " + name +
                                                 " " + pass + " cannot run this call: " + r.why_not);
}

int none_takes(const char *pass, const std::string &sm90_why, const PlanResult &sm80) {
  if (sm80.code != 0) return fail(sm80.code, sm80.why_not);
  std::string msg = std::string("no cuda flash ") + pass + " kernel takes this call: ";
  if (!sm90_why.empty()) msg += sm90_why + "; ";
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, msg + sm80.why_not);
}

int no_flash_family(int cc, const char *pass) {
  return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, std::string("the cuda flash ") + pass +
                                                 " needs compute capability 8.0 or newer; this device is " +
                                                 std::to_string(cc / 10) + "." + std::to_string(cc % 10));
}

}  // namespace flashbox::detail
#endif
