// Which deterministic order the Hopper backward runs (bwd_sm90_tile_order.cuh, "Deterministic
// mode"), chosen per problem by the plan (flash_bwd_sm90.cu) and named in its kernel ("_qdesc",
// "_dqpair"). Host-only, so the choice is tested without a device (tests/backward/cuda_backward_test.cpp).
#pragma once
#include <cstdint>

namespace flashbox::sm90::bwd {

// The ascending order and its walk (the ascending_order instantiations: key block first_n_block(m)
// adds first, the longest-first dispatch kept, the walk over query blocks descending with the group's
// heads innermost) for bf16 fixed-length calls at head_dim 128, and at head_dim 64 with GQA groups > 1
// (each CTA walks the group's heads, 2x-8x longer, which the descending order's shortest-first
// dispatch leaves for the end). Measured, det/non-det with two dQ writers: D128 causal T 1024..16384
// 0.94-0.98 (descending: 0.82-0.89), GQA 32/8 D128 0.976 (descending: 0.68). At head_dim 64 with one
// query head per kv head the descending order with two writers is the better one at every length
// (0.90 against 0.84 at T 1024; at T 16384 the ascending order's adds form a chain of completion
// waits with no slack between short CTAs), so d64 MHA stays descending.
// bf16 only (fp16 deterministic calls keep the descending order, correct and at its speed), fixed
// length only (varlen keeps the descending order over its per-sequence grid); head_dim above 128 has
// no deterministic mode. kernel_d: the instantiation's head_dim.
constexpr bool uses_qdesc_walk(int kernel_d, bool bf16, bool varlen, int64_t group) {
  if (!bf16 || varlen) return false;
  return kernel_d == 128 || (kernel_d == 64 && group > 1);
}

// The deterministic calls that run the descending order with two dQ writers (the two_dq_writers
// instantiation): bf16 at head_dim 64 outside the ascending order and without softcap (softcap has
// its softcap_select kernel), fixed length or varlen. Measured (B4 H12 causal): det/non-det 0.90 /
// 0.91 / 0.96 / 0.93 / 0.95 at T = 1024..16384 against one writer's 0.84 / 0.84 / 0.86 / 0.88 / 0.90.
// fp16 and the other head dims keep one writer (one more kernel each in CI for them).
constexpr bool uses_dq_pair(int kernel_d, bool bf16, bool qdesc, bool capped) {
  return kernel_d == 64 && bf16 && !qdesc && !capped;
}

}  // namespace flashbox::sm90::bwd
