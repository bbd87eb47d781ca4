// build_mod (see mod_build.hpp): key, cache, compile, store, per architecture.
#include "jit/mod_build.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "jit/mod_cache.hpp"
#include "jit/mod_source.hpp"
#include "jit/nvrtc_compiler.hpp"

namespace flashbox::jit {
namespace {

const char *kind_name(flashbox_mod_kind k) { return k == FLASHBOX_MOD_MASK ? "mask mod" : "score mod"; }

}  // namespace

std::string mod_cache_key(const std::string &translation_unit, int arch) {
  const NvrtcInfo &nv = nvrtc_info();
  core::Sha256 h;
  h.field("flashbox mod cache 1");
  h.field(FLASHBOX_VERSION_STRING);
  h.field("nvrtc " + std::to_string(nv.major) + "." + std::to_string(nv.minor));
  h.field(arch_name(arch));
  for (const std::string &o : mod_compile_options(arch)) h.field(o);
  h.field(translation_unit);
  return core::hex(h.digest());
}

int build_mod(const ModSpec &spec, const std::vector<int> &archs, const std::string &cache_dir, CompiledMod &out) {
  const auto start = std::chrono::steady_clock::now();
  const std::string what = std::string(kind_name(spec.kind)) + " " + spec.function_name;
  const NvrtcInfo &nv = nvrtc_info();
  if (!nv.available) return detail::fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, what + ": " + nv.why);
  for (int arch : archs)
    if (std::find(nv.archs.begin(), nv.archs.end(), arch) == nv.archs.end()) {
      std::string known;
      for (int a : nv.archs) known += (known.empty() ? "" : ", ") + std::to_string(a);
      return detail::fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, what + ": arch " + std::to_string(arch) + " is not one NVRTC " +
                                                             std::to_string(nv.major) + "." + std::to_string(nv.minor) +
                                                             " compiles for (" + known + ")");
    }
  CompiledMod mod;
  mod.spec = spec;
  mod.translation_unit = mod_translation_unit(spec);
  mod.cached = !cache_dir.empty();
  for (int arch : archs) {
    Cubin c;
    c.arch = arch;
    c.key = mod_cache_key(mod.translation_unit, arch);
    if (cache_load(cache_dir, c.key, c.image)) {
      c.from_cache = true;
      mod.cubins.push_back(std::move(c));
      continue;
    }
    std::string log;
    const CompileStatus st = nvrtc_compile(mod.translation_unit, "flashbox_mod.cu", mod_compile_options(arch), c.image, log);
    if (st == CompileStatus::compile_error)
      return detail::fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                          what + " does not compile for " + arch_name(arch) + " (NVRTC " + std::to_string(nv.major) +
                              "." + std::to_string(nv.minor) + "; lines of \"mod.cu\" are the source's):\n" + log);
    if (st != CompileStatus::ok) return detail::fail(FLASHBOX_ERR_INTERNAL, what + ": " + log);
    mod.cubins.push_back(std::move(c));
  }
  // Stored only once every arch compiled: a mod that fails on one arch leaves nothing behind.
  for (const Cubin &c : mod.cubins)
    if (!c.from_cache) mod.cached = cache_store(cache_dir, c.key, c.image) && mod.cached;
  mod.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out = std::move(mod);
  return FLASHBOX_OK;
}

}  // namespace flashbox::jit
