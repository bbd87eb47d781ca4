// The translation unit NVRTC compiles for a mod: the prelude (the signature contract's types in
// namespace fbx: fixed-width integers, bf16/f16 storage types, Tensor<T, rank> with its bounds-checked
// accessor, the signature trait and apply_mask / apply_score), the struct fbx::Aux with one Tensor
// per declared auxiliary tensor, the caller's source behind `#line 1 "mod.cu"` (so the compiler's
// messages carry the caller's own line numbers), and the probe kernel
//   extern "C" __global__ void flashbox_mod_probe(fbx::Aux aux, int b, int h, int q_len, int kv_len,
//                                                  const float *scores, float *out)
// which checks the function's signature (a static_assert whose message states the contract) and
// evaluates it over a q_len x kv_len tile of one (b, h): out[q * kv_len + kv] is 1 or 0 for a mask,
// score_mod(scores[...]) for a score. The probe makes the function's errors appear at create time,
// and it is the reference a GPU test of a mod-taking kernel can compare against. An attention kernel
// that takes mods is meant to compile the same prelude, Aux and source, and call
// fbx::apply_mask<&NAME> / fbx::apply_score<&NAME> where it masks or transforms a score.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "jit/compiled_mod.hpp"

namespace flashbox::jit {

// A mask mod's translation unit also holds its block kernels (flashbox_mask_classify, _lists,
// _tile_base, _bits: mod_source.cpp says what each does), which src/api/mask_mod_tiles.cpp launches
// with fbx::Aux and this plan, the device's fbx::MaskGrid field for field.
std::string mod_translation_unit(const ModSpec &spec);

struct MaskGrid {
  int64_t batch = 1, heads = 1;
  int64_t seqlen_q = 0, seqlen_k = 0, q_block = 128, kv_block = 128, num_q_blocks = 0, num_kv_blocks = 0;
  int64_t bm_batch = 1, bm_heads = 1, max_kv = 0;
  int64_t all_partial = 0;
  const int32_t *kv_num = nullptr, *kv_idx = nullptr;
  int32_t *out_kv_num = nullptr, *out_kv_idx = nullptr, *out_full_num = nullptr, *out_full_idx = nullptr;
  uint8_t *kinds = nullptr;
  int64_t *tile_base = nullptr;
  uint32_t *bits = nullptr;
};
static_assert(sizeof(MaskGrid) == 21 * 8, "jit::MaskGrid: 8-byte fields only, as fbx::MaskGrid");

// The byte layout of fbx::Aux, which a kernel taking the mod receives by value: each Tensor<T, rank>
// is its data pointer, then `rank` int64 sizes, then `rank` int64 strides (8-byte fields, no
// padding), one after another in the order of the declaration; an Aux with no tensor is C++'s empty
// struct of 1 byte. The translation unit static_asserts each member's size and alignment and the
// struct's size against these numbers (NVRTC has no offsetof; with 8-byte members and no padding the
// offsets follow), so the host's packing and the device's struct cannot drift apart unnoticed.
struct AuxLayout {
  std::vector<size_t> offsets;  // of each member, bytes
  size_t bytes = 1;             // sizeof(fbx::Aux)
};
AuxLayout aux_layout(const ModSpec &spec);

// The kernel parameter fbx::Aux for a call's tensors (checked against the declaration already:
// src/api/mod_api.cpp), as aux_layout says, in 8-byte words (at least one).
std::vector<uint64_t> pack_aux(const ModSpec &spec, const flashbox_aux_tensor *tensors);

// NVRTC's options for `arch` (compute capability x 10) besides the architecture: C++17, fast math as
// the library's kernels are built, functions without an execution space taken as __device__.
std::vector<std::string> mod_compile_options(int arch);

// "sm_80", "sm_90a" (90 is Hopper's arch-specific target, which the sm90 kernels need), "sm_100".
std::string arch_name(int arch);

}  // namespace flashbox::jit
