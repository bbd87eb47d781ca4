// Builds a CompiledMod: for each architecture, the cache key of (flashbox version, NVRTC version,
// arch, options, translation unit); the CUBIN from the disk cache when a whole entry is there, else
// NVRTC's, stored back. A compile error of any architecture fails the whole mod and stores nothing
// for it; a cache that cannot be written is no error (CompiledMod::cached says so).
#pragma once
#include <string>
#include <vector>

#include "jit/compiled_mod.hpp"

namespace flashbox::jit {

// The cache key (hex SHA-256) of `translation_unit` compiled for `arch` with the current NVRTC.
std::string mod_cache_key(const std::string &translation_unit, int arch);

// FLASHBOX_OK, or fail(...): FLASHBOX_ERR_INVALID_ARGUMENT with the compiler's log (the mod does not
// compile), FLASHBOX_ERR_UNSUPPORTED_IMPL (no NVRTC, or an arch it does not know), FLASHBOX_ERR_INTERNAL
// (NVRTC failed otherwise). `archs`: compute capability x 10, at least one; `cache_dir` empty: no
// disk cache.
int build_mod(const ModSpec &spec, const std::vector<int> &archs, const std::string &cache_dir, CompiledMod &out);

}  // namespace flashbox::jit
