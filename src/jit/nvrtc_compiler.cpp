// NVRTC through dlopen (see nvrtc_compiler.hpp). The function types come from nvrtc.h, so a
// signature that changed between toolkits fails to compile here rather than at run time.
#include "jit/nvrtc_compiler.hpp"

#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#ifdef FLASHBOX_HAVE_NVRTC
#include <dlfcn.h>
#include <nvrtc.h>
#endif

namespace flashbox::jit {

#ifdef FLASHBOX_HAVE_NVRTC
namespace {

struct Nvrtc {
  decltype(&nvrtcVersion) version = nullptr;
  decltype(&nvrtcGetErrorString) error_string = nullptr;
  decltype(&nvrtcGetNumSupportedArchs) num_archs = nullptr;
  decltype(&nvrtcGetSupportedArchs) archs = nullptr;
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  NvrtcInfo info;
};

// Loaded once; the library stays loaded for the life of the process (a dlclose while another
// thread compiles would unmap code under it).
const Nvrtc &nvrtc() {
  static Nvrtc n;
  static std::once_flag once;
  std::call_once(once, [] {
    void *lib = dlopen(FLASHBOX_NVRTC_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libnvrtc.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *err = dlerror();
      n.info.why = std::string("cannot load NVRTC (" FLASHBOX_NVRTC_SONAME "): ") + (err ? err : "dlopen failed");
      return;
    }
    bool ok = true;
    auto get = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && ok) ok = false, n.info.why = std::string("NVRTC lacks ") + name;
    };
    get(n.version, "nvrtcVersion");
    get(n.error_string, "nvrtcGetErrorString");
    get(n.num_archs, "nvrtcGetNumSupportedArchs");
    get(n.archs, "nvrtcGetSupportedArchs");
    get(n.create, "nvrtcCreateProgram");
    get(n.destroy, "nvrtcDestroyProgram");
    get(n.compile, "nvrtcCompileProgram");
    get(n.log_size, "nvrtcGetProgramLogSize");
    get(n.log, "nvrtcGetProgramLog");
    get(n.cubin_size, "nvrtcGetCUBINSize");
    get(n.cubin, "nvrtcGetCUBIN");
    if (!ok) return;
    int count = 0;
    if (n.version(&n.info.major, &n.info.minor) != NVRTC_SUCCESS || n.num_archs(&count) != NVRTC_SUCCESS) {
      n.info.why = "NVRTC does not report its version";
      return;
    }
    n.info.archs.resize(size_t(count));
    if (count > 0 && n.archs(n.info.archs.data()) != NVRTC_SUCCESS) {
      n.info.why = "NVRTC does not report its architectures";
      return;
    }
    n.info.available = true;
  });
  return n;
}

}  // namespace

const NvrtcInfo &nvrtc_info() { return nvrtc().info; }

CompileStatus nvrtc_compile(const std::string &source, const std::string &name,
                            const std::vector<std::string> &options, std::vector<char> &cubin, std::string &log) {
  const Nvrtc &n = nvrtc();
  if (!n.info.available) return log = n.info.why, CompileStatus::nvrtc_error;
  nvrtcProgram prog = nullptr;
  if (nvrtcResult r = n.create(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr); r != NVRTC_SUCCESS)
    return log = std::string("nvrtcCreateProgram: ") + n.error_string(r), CompileStatus::nvrtc_error;
  std::vector<const char *> opts;
  for (const std::string &o : options) opts.push_back(o.c_str());
  const nvrtcResult r = n.compile(prog, int(opts.size()), opts.data());
  size_t log_bytes = 0;
  log.clear();
  if (n.log_size(prog, &log_bytes) == NVRTC_SUCCESS && log_bytes > 1) {
    log.resize(log_bytes);
    if (n.log(prog, log.data()) != NVRTC_SUCCESS) log.clear();
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  }
  CompileStatus status = CompileStatus::ok;
  if (r == NVRTC_ERROR_COMPILATION) {
    status = CompileStatus::compile_error;
  } else if (r != NVRTC_SUCCESS) {
    log = std::string("nvrtcCompileProgram: ") + n.error_string(r) + (log.empty() ? "" : "\n" + log);
    status = CompileStatus::nvrtc_error;
  } else {
    size_t bytes = 0;
    if (n.cubin_size(prog, &bytes) != NVRTC_SUCCESS || bytes == 0) {
      log = "NVRTC produced no CUBIN (is the architecture a real one?)";
      status = CompileStatus::nvrtc_error;
    } else {
      cubin.resize(bytes);
      if (n.cubin(prog, cubin.data()) != NVRTC_SUCCESS)
        log = "nvrtcGetCUBIN failed", status = CompileStatus::nvrtc_error;
    }
  }
  n.destroy(&prog);
  return status;
}

#else  // built without nvrtc.h

const NvrtcInfo &nvrtc_info() {
  static const NvrtcInfo info{false, "flashbox was built without the CUDA toolkit's NVRTC (FLASHBOX_NVRTC)", 0, 0, {}};
  return info;
}

CompileStatus nvrtc_compile(const std::string &, const std::string &, const std::vector<std::string> &,
                            std::vector<char> &, std::string &log) {
  log = nvrtc_info().why;
  return CompileStatus::nvrtc_error;
}

#endif

}  // namespace flashbox::jit
