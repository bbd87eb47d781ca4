// The normalised description of one attention call. src/api/validate.cpp builds it once, after every
// rule of validate.hpp has passed, and every backend's parameter builder copies from it: backends
// never see the raw C structs, never recompute the scale or the GQA group, and may assert (not
// re-check) anything validation guarantees.
//
// Field names follow flashbox_attention_args / flashbox_attention_grad_args so a backend reads
// `p.seqlen_q`, `p.q_stride[1]` as before; what validation resolves is added (group, scale,
// scale_log2, the tuning the caller asked for) and what it consumes is gone (softmax_scale: use
// scale / scale_log2).
#pragma once
#include <cstdint>
#include <string>

#include "core/masks.hpp"
#include "core/tuning.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

// Largest head_dim (and head_dim_v) the CPU levels accept (src/api/validate.cpp): 576, MLA's
// 512 latent + 64 rotary columns (FlashMLA's head dim), which is also what q . k + qv . v becomes when
// the CPU runs it as one product over [q | qv] and [k | v]. The levels size their tiles from the
// call's head dims, so the limit only bounds the work of one row.
inline constexpr int64_t kCpuMaxHeadDim = 576;

// What a call asks of the kernel choice: the caller's options (family, SM margin) and the private
// tuning overrides in force (src/api/tuning.hpp; all defaults outside benchmarks and tests). Every
// field at its default means "the library's own choice".
struct Tuning {
  flashbox_kernel_family family = FLASHBOX_FAMILY_AUTO;
  int sm_margin = 0;  // SMs a device-sized grid leaves free (options.sm_margin)
  TuningOverrides overrides;
};

struct Problem {
  flashbox_device device;
  flashbox_dtype dtype;
  flashbox_impl impl;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  // V's and O's head dim (flashbox_attention_ext's head_dim_v, resolved: head_dim unless the caller
  // set another). Scores use head_dim; v and o rows hold head_dim_v elements (in a GradProblem, dout
  // and dv too). The cpu levels take head_dim_v != head_dim as it is; on cuda src/api runs such a
  // problem as problems with head_dim_v = head_dim on column slices (src/api/head_dim_v_split.hpp),
  // except a forward or backward whose pair has a Hopper kernel of its own (sm90::dv_kernel): only the
  // sm90 forward's and backward's plans see head_dim_v != head_dim, and every other CUDA plan declines it.
  int64_t head_dim_v;
  int64_t group;  // heads_q / heads_kv: query head h reads kv head h / group
  const void *q, *k, *v;
  void *o;
  float *lse;  // may be null in the forward; required (and read) in the backward
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];  // batch, seq, head (elements)
  float scale, scale_log2;  // softmax scale (0 resolved to 1/sqrt(head_dim)) and times log2 e
  int causal;               // 0 or 1, bottom-right aligned
  core::ScoreMods mods;     // mask (causal folded in as window_right = 0) and score transforms
  // Variable-length batches (flashbox_attention_ext): null = fixed length. int32 [batch + 1] prefix
  // sums in the memory of `device`; batch is then the number of sequences, seqlen_q / seqlen_k the
  // total token counts, the tensors [total, heads, head_dim] (stride[0] unused) and lse
  // [heads_q, total_q]. max_seqlen_* bound every sequence's length.
  const int32_t *cu_seqlens_q = nullptr, *cu_seqlens_k = nullptr;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  // flashbox_attention_ext's used lengths (int32 [batch] in the memory of `device`; null: off) and
  // block mask (block_mask.kv_num_blocks null: off). The cpu levels read both through `mods` (the
  // API folds them in); the CUDA kernels read them here. Document ids, prefix lengths and the chunk
  // are in `mods` for every backend.
  const int32_t *seqused_q = nullptr, *seqused_k = nullptr;
  flashbox_block_mask block_mask{};
  // A mask mod's bit tiles (cuda/common/mask_ext.cuh, DeviceMaskExt::mod_bits), written into scratch
  // by src/api/mask_mod_tiles.hpp for block_mask's partial entries (block_mask is then always set:
  // the caller's, or the one built from the mod). Null: no mask mod.
  const uint32_t *mod_bits = nullptr;
  const int64_t *mod_tile_base = nullptr;
  int64_t mod_batch = 1, mod_heads = 1;
  void *stream;  // cudaStream_t for FLASHBOX_CUDA
  Tuning tuning;
  // dtype FLASHBOX_FLOAT8_E4M3 (flashbox_attention_ext): o's dtype (bf16 or fp16) and the fp32
  // [batch, heads_kv] descales in the memory of `device` (null: 1), element (b, g) at
  // b * stride[0] + g * stride[1]. Only the sm90 fp8 forward reads them on cuda.
  flashbox_dtype out_dtype = FLASHBOX_FLOAT32;
  const float *q_descale = nullptr, *k_descale = nullptr, *v_descale = nullptr;
  int64_t q_descale_stride[2] = {0, 0}, k_descale_stride[2] = {0, 0}, v_descale_stride[2] = {0, 0};

  bool varlen() const { return cu_seqlens_q != nullptr; }
};

struct GradProblem {
  Problem fwd;  // o and lse are the forward's outputs, read here
  const void *dout;
  int64_t dout_stride[3];
  void *dq, *dk, *dv;
  int64_t dq_stride[3], dk_stride[3], dv_stride[3];
  int deterministic;  // 0 or 1
  // A learnable sink's gradient, fp32 [heads_q] in the memory of `device` (flashbox_attention_ext's
  // dsink): set exactly when fwd.mods.sinks is; null otherwise.
  float *dsink = nullptr;
};

// What a problem asks beyond the plain call (fixed lengths, at most the causal mask), named for an
// error message, e.g. "sliding window (window_left = 4)"; "" when it asks nothing more. A backend
// that lacks a feature declines with it, so no backend silently ignores a field.
std::string extension_in_use(const Problem &p);
// The mask families of flashbox_attention_ext a problem uses (document ids, prefix lengths, the
// chunk, seqused, a block mask), named for an error message; "" when none. On cuda the sm80 family
// takes them all, the sm90 forward those its mask-family kernels run (flash_fwd_sm90.cu says which).
std::string mask_family_in_use(const Problem &p);

// The normalised problem of arguments that passed validation (scalars at least: the workspace query
// builds one without pointers). `mods` defaults to the causal flag alone (the plain C API); the
// extension (src/api/ext_api.cpp) passes its window, softcap and ALiBi. Tuning is left at its
// defaults; src/api fills it.
Problem make_problem(const flashbox_attention_args &a);
Problem make_problem(const flashbox_attention_args &a, const core::ScoreMods &mods);
// The same with V's and O's head dim (0: head_dim), for the extension's forward.
Problem make_problem(const flashbox_attention_args &a, const core::ScoreMods &mods, int64_t head_dim_v);
GradProblem make_grad_problem(const flashbox_attention_grad_args &g);
GradProblem make_grad_problem(const flashbox_attention_grad_args &g, const core::ScoreMods &mods);
// The same with V's and O's head dim (0: head_dim), for the extension's backward: dout and dv follow
// it as o and v do.
GradProblem make_grad_problem(const flashbox_attention_grad_args &g, const core::ScoreMods &mods, int64_t head_dim_v);

}  // namespace flashbox::detail
