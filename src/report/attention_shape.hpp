// One attention problem as the experiments describe it (dense BTHD tensors), and the C API arguments
// for it given where its buffers live.
#pragma once
#include "flashbox/flashbox.h"

#include <cstdint>
#include <vector>

namespace flashbox::report {

struct AttentionShape {
  int64_t batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
  bool causal = true;

  int64_t q_elements() const { return batch * seqlen_q * heads_q * head_dim; }  // also O
  int64_t kv_elements() const { return batch * seqlen_k * heads_kv * head_dim; }
  int64_t lse_elements() const { return batch * heads_q * seqlen_q; }
  int64_t q_bytes() const;
  int64_t kv_bytes() const;
  // Multiply-adds of QK^T and PV counted as 2 FLOPs each, over the (query, key) pairs a causal mask
  // keeps as the SPEC counts them: 4*B*H*Tq*Tk*D without a mask, half of it with one.
  double forward_flops() const;
};

// Throws std::invalid_argument when a size is <= 0 or heads_q is not a multiple of heads_kv; the C API
// checks the same, but the tools allocate buffers before calling it.
void validate(const AttentionShape &shape);

flashbox_attention_args make_args(const AttentionShape &shape, flashbox_device device, flashbox_impl impl,
                                  const void *q, const void *k, const void *v, void *o, float *lse);

// Host buffers of one problem: seeded random q, k, v (standard normal, in the shape's dtype); o and lse
// to be written.
struct HostAttention {
  HostAttention(const AttentionShape &shape, uint64_t seed);
  flashbox_attention_args args(flashbox_impl impl);  // CPU arguments pointing at these buffers

  AttentionShape shape;
  std::vector<unsigned char> q, k, v, o;
  std::vector<float> lse;
};

}  // namespace flashbox::report
