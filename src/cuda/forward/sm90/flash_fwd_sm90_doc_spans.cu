// The doc spans of the Hopper forward's mask-family kernels (FwdParams::doc_spans), built on the
// device before the forward.
//
// With document ids, the sm80 forward narrows each CTA's keys to those of its rows' documents by a
// scan at the CTA's start (cuda/common/mask_ext.cuh, doc_span). The sm90 kernel cannot: its TMA
// producer is one thread that runs ahead of the consumers, and the two sides must agree on the walk
// before either starts a tile. So one small kernel runs the same scan first, one CTA per (batch
// entry, query block of BM rows), and writes {first key, last key + 1} of the keys whose id lies
// within the rows' id range ({0, 0}: none, or rows past the used ones); producer and consumers read
// the block's entry (mask_walk.cuh's range walk). Exact for sorted (packed) documents, a superset
// for any other order, as on sm80. Lengths are the used ones (seqused_q/k); varlen sequences are cut
// from the prefix sums as the forward cuts them (varlen_span, clamped), one row of blocks each, as
// many as the longest has. The ids are device memory the host never reads; the scan reads only
// positions below the used lengths.
#include <cuda_runtime.h>

#include "cuda/common/mask_ext.cuh"
#include "cuda/common/varlen_span.cuh"
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"

namespace flashbox::sm90 {
namespace {

constexpr int kSpanThreads = 256;

__global__ void __launch_bounds__(kSpanThreads) doc_spans_kernel(const DocSpanArgs a) {
  const int b = int(blockIdx.x) / a.num_m_blocks, m = int(blockIdx.x) % a.num_m_blocks;
  int sq = a.seqlen_q, sk = a.seqlen_k;
  int64_t q_off = int64_t(b) * a.ext.doc_q_stride, k_off = int64_t(b) * a.ext.doc_k_stride;
  if (a.cu_q != nullptr) {
    const cuda::VarlenSpan s = cuda::varlen_span(a.cu_q, a.cu_k, b, a.total_q, a.total_k, a.max_q, a.max_k);
    sq = s.seqlen_q, sk = s.seqlen_k, q_off = s.q0, k_off = s.k0;
  }
  cuda::ext_used_lengths(a.ext, b, sq, sk);
  const int r0 = min(m * a.bm, sq), r1 = min(r0 + a.bm, sq);
  int begin = 0, end = 0;
  cuda::doc_span<kSpanThreads>(a.ext.doc_q + q_off, r0, r1, a.ext.doc_k + k_off, 0, sk, &begin, &end);
  if (threadIdx.x == 0) a.spans[blockIdx.x] = make_int2(begin, end);
}

}  // namespace

cudaError_t launch_doc_spans(const DocSpanArgs &a, cudaStream_t stream) {
  doc_spans_kernel<<<unsigned(a.batch) * unsigned(a.num_m_blocks), kSpanThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace flashbox::sm90
