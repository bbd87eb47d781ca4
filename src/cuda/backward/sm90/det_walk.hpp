// Which deterministic order the Hopper backward runs (flash_bwd_sm90_kernel.cuh, "Deterministic
// mode"), chosen per problem by the plan (flash_bwd_sm90.cu) and named in its kernel ("_qdesc").
// Host-only, so the choice is tested without a device (tests/backward/cuda_backward_test.cpp).
#pragma once
#include <cstdint>

#include "core/env_switch.hpp"

namespace flashbox::sm90::bwd {

// v10's order and walk (the QDESC instantiations, flash_bwd_sm90_qdesc.cu): key block 0 first with
// the longest-first dispatch kept, the walk over query blocks descending with the group's heads
// innermost. Measured (bench/NOTES.md, v10, a264e1d as a run-time branch): det/non-det 0.88-0.91 at
// head_dim 128 for every T (v9's order: 0.84-0.90) and 0.90 for GQA 32/8 D128 (v9: 0.68), but at
// head_dim 64 with one query head per kv head 0.74-0.87 from T = 4096 (v9: 0.91-0.94): there its
// adds form a chain of completion waits with no slack between short CTAs. So: v10's for head_dim
// 128, and for head_dim 64 with GQA groups > 1 (each CTA walks the group's heads, 2x-8x longer,
// which v9's shortest-first dispatch leaves for the end, the 0.68); v9's otherwise (d64 MHA:
// d64_mha_qdesc, below). bf16 only (two
// instantiations instead of four; fp16 deterministic calls keep v9's order, correct and at v9's
// speed); fixed length only (varlen keeps v9's order over its per-sequence grid); head_dim 256 has
// no deterministic mode. As these compile-time kernels (v16, 2026-12-01, same tensors): D128 causal
// T = 1024..16384 0.873 / 0.844 / 0.887 / 0.887 / 0.882 against v9's order's 0.822 / 0.811 / 0.876 /
// 0.857 / 0.888 (a tie at 16384, inside the run-to-run spread), GQA 32/8 D128 0.881 (v9: 0.675), D64
// 0.977 (v9: 0.884). With two dQ writers in the QDESC kernels (v18): D128 causal 0.941 / 0.954 /
// 0.951 / 0.962 / 0.976, non-causal 16384 0.984, GQA 32/8 D128 0.976, D64 0.995; head_dim 64 MHA on
// them (branch gqa): better than v9's up to 1024 keys only (d64_mha_qdesc). kernel_d: the instantiation's
// head_dim (64, 128 or 256). d64_mha: head_dim 64 with one query head per kv head goes to v10's
// order too (d64_mha_qdesc decides: only when forced, since v20).
constexpr bool uses_qdesc_walk(int kernel_d, bool bf16, bool varlen, int64_t group, bool d64_mha = false) {
  if (!bf16 || varlen) return false;
  return kernel_d == 128 || (kernel_d == 64 && (group > 1 || d64_mha));
}

// Head_dim 64 MHA on v10's order (the QDESC d64 kernel, v18's two writers) was better than v9's
// one-writer order up to 1024 keys only (branch gqa, 2026-12-01, bench/NOTES.md: det/non-det D64 H12 B4
// causal, v10's against v9's, 0.876 / 0.859 at T = 1024, 0.874 / 0.888 at 2048, 0.746 / 0.980 at
// 16384). With two writers on v9's order too (DQPAIR, v20) v9's is the better one at every length
// (0.90 against v10's 0.84 at 1024), so d64 MHA takes v9's order by default.
// FLASHBOX_SM90_BWD_D64_QDESC=1 / =0 (read per call) forces v10's / v9's, for the A/B.
inline bool d64_mha_qdesc() {
  const env::Switch01 forced = env::switch_01("FLASHBOX_SM90_BWD_D64_QDESC");
  return forced.state == env::State::ok && forced.on;
}

// The deterministic calls that run v9's order with two dQ writers (Cfg::DQPAIR, flash_bwd_sm90_dqpair.cu):
// bf16 at head_dim 64 outside v10's order and without softcap (softcap has its CAPSEL kernel), fixed
// length or varlen. Measured (v20, bench/NOTES.md, B4 H12 causal): det/non-det 0.90 / 0.91 / 0.96 /
// 0.93 / 0.95 at T = 1024..16384 against the one writer's 0.84 / 0.84 / 0.86 / 0.88 / 0.90. fp16 and
// the other head dims keep one writer (one more kernel each in CI for them).
constexpr bool uses_dq_pair(int kernel_d, bool bf16, bool qdesc, bool capped) {
  return kernel_d == 64 && bf16 && !qdesc && !capped;
}

}  // namespace flashbox::sm90::bwd
