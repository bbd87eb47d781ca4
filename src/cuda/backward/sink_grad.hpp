// The gradient of a learnable sink (flashbox_attention_ext.dsink; core/masks.hpp), shared by both
// backward families. The sink is a column of every row's softmax with no value, so its probability in
// row i is P_sink = exp(sink - LSE_i) (the forward's LSE includes the sink) and
//   dsink[h] = -sum over batch entries b and rows i of exp(sink[h] - LSE[b, h, i]) * D[b, h, i],
// D = rowsum(dO * O), the row sums each family's preprocessing already computes (sm80:
// flash_bwd_aux.cu's rowsum; sm90: flash_bwd_sm90_prepare.cu). Nothing else of the backward changes:
// dQ, dK and dV read an LSE that already holds the sink.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashbox::cuda::bwd {

struct SinkGradArgs {
  const float *sinks;  // fp32 [heads_q], natural units
  const float *lse;    // the forward's [batch, heads_q, seqlen_q] (varlen: batch 1, seqlen_q = total_q)
  const float *dsum;   // D of row i of (b, h) at dsum[(b * heads_q + h) * dsum_ld + i]
  int64_t dsum_ld;     // >= seqlen_q (the sm90 backward pads its rows to whole query blocks)
  float *dsink;        // fp32 [heads_q], written whole (0 where a head has no row)
  int batch, heads_q, seqlen_q;
};

// One CTA per query head sums its rows in a fixed order (each thread a fixed set of rows, in fp64,
// then a tree over the threads in shared memory): the result does not depend on scheduling, so the
// backward stays deterministic. A row with LSE = -inf (no key and no sink: only a caller's own LSE can
// have one) contributes 0. Launched on `stream` after the row sums.
cudaError_t launch_sink_grad(const SinkGradArgs &a, cudaStream_t stream);

}  // namespace flashbox::cuda::bwd
