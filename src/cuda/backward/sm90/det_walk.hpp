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
// which v9's shortest-first dispatch leaves for the end, the 0.68), and head_dim 64 MHA up to 1024
// keys (d64_mha_qdesc, below); v9's otherwise. bf16 only (two
// instantiations instead of four; fp16 deterministic calls keep v9's order, correct and at v9's
// speed); fixed length only (varlen keeps v9's order over its per-sequence grid); head_dim 256 has
// no deterministic mode. As these compile-time kernels (v16, 2026-12-01, same tensors): D128 causal
// T = 1024..16384 0.873 / 0.844 / 0.887 / 0.887 / 0.882 against v9's order's 0.822 / 0.811 / 0.876 /
// 0.857 / 0.888 (a tie at 16384, inside the run-to-run spread), GQA 32/8 D128 0.881 (v9: 0.675), D64
// 0.977 (v9: 0.884). With two dQ writers in the QDESC kernels (v18): D128 causal 0.941 / 0.954 /
// 0.951 / 0.962 / 0.976, non-causal 16384 0.984, GQA 32/8 D128 0.976, D64 0.995; head_dim 64 MHA on
// them (branch gqa): better than v9's up to 1024 keys only (d64_mha_qdesc). kernel_d: the instantiation's
// head_dim (64, 128 or 256). d64_mha: head_dim 64 with one query head per kv head goes to v10's
// order too (d64_mha_qdesc decides, by length).
constexpr bool uses_qdesc_walk(int kernel_d, bool bf16, bool varlen, int64_t group, bool d64_mha = false) {
  if (!bf16 || varlen) return false;
  return kernel_d == 128 || (kernel_d == 64 && (group > 1 || d64_mha));
}

// Head_dim 64 MHA on v10's order (the QDESC d64 kernel, v18's two writers) at seqlen_k <= 1024 only
// (branch gqa, 2026-12-01, bench/NOTES.md): det/non-det D64 H12 B4 causal, v10's against v9's,
// 0.876 / 0.859 at T = 1024 (0.097 ms against 0.099 in all 3 rounds), 0.874 / 0.888 at 2048, 0.843 /
// 0.919 at 4096, 0.836 / 0.957 at 8192, 0.746 / 0.980 at 16384: from 2048 keys on, v10's chain of
// completion waits costs more than v9's shortest-first dispatch gives away (at 1024, 8 key blocks,
// under three waves of CTAs, v9 ends on its longest ones). FLASHBOX_SM90_BWD_D64_QDESC=1 / =0 (read
// per call) forces v10's / v9's at every length, for the A/B.
inline bool d64_mha_qdesc(int64_t seqlen_k) {
  const env::Switch01 forced = env::switch_01("FLASHBOX_SM90_BWD_D64_QDESC");
  if (forced.state == env::State::ok) return forced.on;
  return seqlen_k <= 1024;
}

}  // namespace flashbox::sm90::bwd
