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

namespace flashbox::cuda {

struct VarlenSpan {
  int q0, seqlen_q;  // first query token of the sequence in the packed tensors, and its length
  int k0, seqlen_k;
};

__device__ __forceinline__ VarlenSpan varlen_span(const int32_t *cu_q, const int32_t *cu_k, int b, int total_q,
                                                  int total_k, int max_q, int max_k) {
  VarlenSpan s;
  s.q0 = min(max(cu_q[b], 0), total_q);
  s.seqlen_q = min(min(max(cu_q[b + 1], s.q0), total_q) - s.q0, max_q);
  s.k0 = min(max(cu_k[b], 0), total_k);
  s.seqlen_k = min(min(max(cu_k[b + 1], s.k0), total_k) - s.k0, max_k);
  return s;
}

}  // namespace flashbox::cuda
