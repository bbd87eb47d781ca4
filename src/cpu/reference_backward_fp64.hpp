// The fp64 reference backward every backward implementation is checked against (tests, benchmarks).
#pragma once
#include <cstdint>
#include <vector>

#include "core/masks.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::cpu {

// Gradients of L = sum(dout * O(q, k, v)) in double precision, computed from the grad args' strided
// q, k, v and dout (any dtype) alone: S, P and the row sums D = rowsum(dO * O) are recomputed exactly,
// so g.fwd.o and g.fwd.lse are not read. Follows the C API's contract (bottom-right causal, GQA with
// dK/dV summed over a group's query heads, softmax_scale 0 meaning 1/sqrt(head_dim), a row that sees
// no key contributes nothing). Outputs are dense: dq [batch, seqlen_q, heads_q, head_dim], dk and dv
// [batch, seqlen_k, heads_kv, head_dim]. Arguments are assumed valid; dq/dk/dv pointers are ignored.
// `mods` (null: core::causal_mods(g.fwd.causal)) adds a sliding window, softcap (its derivative
// 1 - tanh^2 in dS) and ALiBi (no gradient), as in src/core/masks.hpp.
// `head_dim_v` (0: head_dim) is V's head dim (flashbox_attention_ext's head_dim_v): v and dout have
// rows of head_dim_v elements, and dv is [batch, seqlen_k, heads_kv, head_dim_v].
// A learnable sink in `mods` joins each row's softmax as a column with no value; `dsink` (when not
// null) becomes its gradient, [heads_q]: -sum over batch and rows of P_sink * D_i.
void reference_attention_backward_fp64(const flashbox_attention_grad_args &g, std::vector<double> &dq,
                                       std::vector<double> &dk, std::vector<double> &dv,
                                       const core::ScoreMods *mods = nullptr, int64_t head_dim_v = 0,
                                       std::vector<double> *dsink = nullptr);

}  // namespace flashbox::cpu
