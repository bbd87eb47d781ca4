// The CPU levels with masks and score transforms (sliding window, softcap, ALiBi; src/core/masks.hpp)
// and the variable-length driver over them. The plain entry points of src/api/backends.hpp are these
// with core::causal_mods(a.causal). Arguments are validated by the API first (src/api/validate.cpp,
// src/api/ext_validate.cpp); slopes are read as mods.slope(b, h) with b the call's batch index.
#pragma once
#include "core/masks.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

int cpu_naive_forward_mods(const flashbox_attention_args &a, const core::ScoreMods &m);
int cpu_blocked_forward_mods(const flashbox_attention_args &a, const core::ScoreMods &m, int block_m = 64,
                             int block_n = 64);
// NAIVE or BLOCKED/AUTO by g.fwd.impl.
int cpu_backward_mods(const flashbox_attention_grad_args &g, const core::ScoreMods &m);

// The extension's calls on the cpu (src/cpu/varlen_attention.cpp): fixed length with mods, or one
// call per sequence for cu_seqlens (lengths 0 handled there: O = 0, LSE = -inf; dK = dV = 0).
int cpu_forward_ext(const flashbox_attention_args &a, const flashbox_attention_ext &e);
int cpu_backward_ext(const flashbox_attention_grad_args &g, const flashbox_attention_ext &e);

}  // namespace flashbox::detail
