#include "report/machine_info.hpp"

#include "flashbox/flashbox.h"
#include "report/build_config.hpp"
#include "report/cuda_device.hpp"

#include <fmt/core.h>

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

namespace flashbox::report {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    auto value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    return value;
  }
  return "unknown";
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string compiler() {
#if defined(__clang__)
  return fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  return fmt::format("gcc {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

}  // namespace

std::string utc_timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json machine_description() {
  nlohmann::json m;
  m["hostname"] = host_name();
  m["cpu"] = cpu_model();
  m["cpu_threads"] = std::thread::hardware_concurrency();
  if (const auto gpu = gpu_info()) {
    m["gpu"] = {{"name", gpu->name},
                {"compute_capability", fmt::format("{}.{}", gpu->cc_major, gpu->cc_minor)},
                {"sms", gpu->sms},
                {"memory_bytes", gpu->memory_bytes},
                {"l2_bytes", gpu->l2_bytes}};
  } else {
    m["gpu"] = nullptr;
  }
#ifdef FLASHBOX_HAVE_CUDA
  const bool cuda = true;
#else
  const bool cuda = false;
#endif
  const nlohmann::json archs = cuda ? nlohmann::json(built_cuda_archs()) : nlohmann::json();
#ifdef NDEBUG
  const char *build_type = "release";
#else
  const char *build_type = "debug";
#endif
  m["build"] = {{"version", flashbox_version()},
                {"cuda", cuda},
                {"cuda_archs", archs},
                {"compiler", compiler()},
                {"build_type", build_type}};
  return m;
}

}  // namespace flashbox::report
