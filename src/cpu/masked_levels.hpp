// The variable-length driver over the CPU levels. The levels themselves (src/core/backends.hpp) take
// a Problem whose mods carry the mask and score transforms (sliding window, softcap, ALiBi;
// src/core/masks.hpp); the plain C API's problems have only the causal flag there. Arguments are
// validated by the API first (src/api/validate.cpp, src/api/ext_validate.cpp); slopes are read as
// mods.slope(b, h) with b the call's batch index.
#pragma once
#include "core/backends.hpp"
#include "core/masks.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

// The extension's calls on the cpu (src/cpu/varlen_attention.cpp): fixed length with mods, or one
// call per sequence for cu_seqlens (lengths 0 handled there: O = 0, LSE = -inf; dK = dV = 0).
// `mods` are the extension's (src/api/ext_validate.cpp, ext_mods); varlen when e has cu_seqlens.
int cpu_forward_ext(const flashbox_attention_args &a, const flashbox_attention_ext &e, const core::ScoreMods &mods);
// dtype FLASHBOX_FLOAT8_E4M3 (src/cpu/fp8_attention.cpp): q, k, v dequantized with the descales into
// fp32, the call run as an fp32 cpu_forward_ext, o written in e.out_dtype.
int cpu_forward_fp8(const flashbox_attention_args &a, const flashbox_attention_ext &e, const core::ScoreMods &mods);
int cpu_backward_ext(const flashbox_attention_grad_args &g, const flashbox_attention_ext &e,
                     const core::ScoreMods &mods);

}  // namespace flashbox::detail
