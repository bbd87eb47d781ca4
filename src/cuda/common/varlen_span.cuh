// One sequence of a variable-length batch, as a kernel sees it: its first query and key token and
// its lengths, read from the caller's int32 prefix sums (cu_seqlens_q/k, device memory).
//
// flashbox does not check device-side prefix sums (that would cost a copy to the host and a
// synchronisation per call, and FlashAttention-2 trusts them too); instead every value is clamped so
// that a kernel never reads or writes outside the packed tensors: starts to [0, total], ends to
// [start, total], lengths to max_seqlen (the grid is sized by it). Well-formed prefix sums are left
// as they are; malformed ones give unspecified values in the rows they name, never an access out of
// bounds (include/flashbox/flashbox.h, flashbox_attention_ext).
#pragma once
#include <cstdint>

// Host and device: tests/api/varlen_span_test.cpp checks the clamping on the CPU.
#if defined(__CUDACC__)
#define FLASHBOX_SPAN_HD __host__ __device__ __forceinline__
#else
#define FLASHBOX_SPAN_HD inline
#endif

namespace flashbox::cuda {

struct VarlenSpan {
  int q0, seqlen_q;  // first query token of the sequence in the packed tensors, and its length
  int k0, seqlen_k;
};

FLASHBOX_SPAN_HD int span_clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Sequence b of the prefix sums cu_q / cu_k (b + 1 readable entries), clamped: 0 <= q0 <= total_q,
// q0 + seqlen_q <= total_q, 0 <= seqlen_q <= max_q (and the same for k), whatever the values.
FLASHBOX_SPAN_HD VarlenSpan varlen_span(const int32_t *cu_q, const int32_t *cu_k, int b, int total_q, int total_k,
                                        int max_q, int max_k) {
  VarlenSpan s;
  s.q0 = span_clamp(cu_q[b], 0, total_q);
  const int q_len = span_clamp(cu_q[b + 1], s.q0, total_q) - s.q0;
  s.seqlen_q = q_len < max_q ? q_len : (max_q > 0 ? max_q : 0);
  s.k0 = span_clamp(cu_k[b], 0, total_k);
  const int k_len = span_clamp(cu_k[b + 1], s.k0, total_k) - s.k0;
  s.seqlen_k = k_len < max_k ? k_len : (max_k > 0 ? max_k : 0);
  return s;
}

}  // namespace flashbox::cuda

#undef FLASHBOX_SPAN_HD
