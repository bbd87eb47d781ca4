// NVRTC, loaded at run time. libflashbox does not link libnvrtc: the first use dlopens it by its
// soname (libnvrtc.so.<the toolkit's major>, then libnvrtc.so), once per process, and resolves the
// few functions used here, so a process that never compiles a mod never needs NVRTC installed. A
// build without nvrtc.h (FLASHBOX_HAVE_NVRTC unset, cmake/Cuda.cmake) keeps the same functions,
// which report NVRTC as unavailable.
#pragma once
#include <string>
#include <vector>

namespace flashbox::jit {

struct NvrtcInfo {
  bool available = false;
  std::string why;           // when not available: what is missing
  int major = 0, minor = 0;  // nvrtcVersion
  std::vector<int> archs;    // nvrtcGetSupportedArchs: compute capability x 10
};
const NvrtcInfo &nvrtc_info();

enum class CompileStatus { ok, compile_error, nvrtc_error };
// Compiles `source` (named `name` in messages) with `options` to a CUBIN. compile_error: the
// program does not compile, `log` is the compiler's log; nvrtc_error: NVRTC itself failed, `log`
// says how.
CompileStatus nvrtc_compile(const std::string &source, const std::string &name,
                            const std::vector<std::string> &options, std::vector<char> &cubin, std::string &log);

}  // namespace flashbox::jit
