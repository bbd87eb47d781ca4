// A mod (include/flashbox/flashbox.h, "Mods") as the library holds it: what the caller declared
// (ModSpec), the translation unit made of it, and one CUBIN per architecture. src/api creates and
// checks these (src/api/mod_api.cpp); a CUDA kernel family that takes mods will load the CUBIN of
// its device's architecture from here, which is why this lives in src/jit (it includes only src/core
// and the public header) and not in src/api, which no backend may include.
//
// src/jit's rules: it includes src/core and the public header only; src/api and src/cuda may
// include it, src/cpu never needs to (a mod is device code). Nothing here reads the environment:
// the cache directory is the caller's (src/api/options.cpp reads it).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "flashbox/flashbox.h"

namespace flashbox::jit {

// Trivially destructible on purpose: GCC at -O3 emits std::_Destroy_aux<false>::__destroy for a
// vector of a type with a destructor as a weak symbol of default visibility despite
// -fvisibility=hidden, which would export a flashbox-named symbol from libflashbox
// (tests/exports/check_exports.py). A name is at most kMaxAuxName characters (src/api checks it).
constexpr int kMaxAuxName = 128;
struct AuxDecl {
  char name[kMaxAuxName + 1];
  flashbox_aux_dtype dtype;
  int rank;
};

struct ModSpec {
  flashbox_mod_kind kind = FLASHBOX_MOD_MASK;
  std::string source, function_name;
  std::vector<AuxDecl> aux;
};

struct Cubin {
  int arch = 0;            // compute capability x 10 (90: sm_90a)
  std::string key;         // SHA-256 (hex) of its cache entry
  std::vector<char> image; // the CUBIN (an ELF file)
  bool from_cache = false; // read from the disk cache, not compiled by this create
};

// What flashbox_mod_create built.
struct CompiledMod {
  ModSpec spec;
  std::string translation_unit;
  std::vector<Cubin> cubins;
  bool cached = false;  // every CUBIN is in the disk cache (written now or read from it)
  double seconds = 0;
};

}  // namespace flashbox::jit

// The C API's opaque handle. `magic` tells a live handle from a destroyed one or a stray pointer
// (best effort: reading a freed handle is the caller's bug, but the common one, a double destroy or
// a handle used after destroy, is then refused instead of crashing more often than not).
struct flashbox_mod_s {
  static constexpr uint64_t kLive = 0x666c617368626f78ull, kDead = 0xdeaddeaddeaddeadull;
  uint64_t magic = kLive;
  flashbox::jit::CompiledMod mod;
  // The CUBINs loaded as CUDA libraries (cudaLibrary_t, as void * so this header needs no CUDA), one
  // per arch, on a call's first use (src/api/mask_mod_tiles.cpp); unloaded by flashbox_mod_destroy.
  std::mutex libraries_mutex;
  std::vector<std::pair<int, void *>> libraries;
};
