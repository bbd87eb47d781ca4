// The fp64 reference every implementation is checked against (tests, `flashbox check`).
#pragma once
#include <cstdint>
#include <vector>

#include "core/masks.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::cpu {

// Plain attention in double precision from the args' strided inputs (any dtype), following the C
// API's contract: bottom-right causal, GQA, softmax_scale 0 meaning 1/sqrt(head_dim), and a row that
// sees no key gets O = 0 and LSE = -inf. `out` becomes dense [batch, seqlen_q, heads_q, head_dim];
// `lse` (when not null) dense [batch, heads_q, seqlen_q], natural log. Arguments are assumed valid;
// a.o and a.lse are ignored. `mods` (null: core::causal_mods(a.causal)) adds a sliding window,
// softcap and ALiBi (src/core/masks.hpp), evaluated in double. head_dim_v (0: head_dim) is V's and
// O's head dim (flashbox_attention_ext's): v is read with rows of head_dim_v elements and `out` is
// dense [batch, seqlen_q, heads_q, head_dim_v]; scores and the default scale use head_dim.
// `qv` (null: none) is flashbox_attention_ext's second query against V: [batch, seqlen_q, heads_q,
// head_dim_v] with its strides; the score is then scale * (q . k + qv . v), and softmax_scale 0 means
// 1/sqrt(head_dim + head_dim_v).
struct QvInput {
  const void *data;
  const int64_t *stride;  // batch, seq, head (elements)
};
void reference_attention_fp64(const flashbox_attention_args &a, std::vector<double> &out, std::vector<double> *lse,
                              const core::ScoreMods *mods = nullptr, int64_t head_dim_v = 0,
                              const QvInput *qv = nullptr);

// Copies rows [0, n) of head h of batch b of a strided [batch, seq, heads, dim] tensor of dtype t
// (strides in elements) into a dense [n, d] double array; the input loader of both fp64 references.
void gather_head(const void *base, flashbox_dtype t, const int64_t *stride, int64_t b, int64_t h, int64_t n, int64_t d,
                 std::vector<double> &dst);

// The scale the API applies: softmax_scale, or 1/sqrt(head_dim) when it is 0.
double effective_softmax_scale(const flashbox_attention_args &a);

// Last key index (exclusive) query row i may see, before clamping to [0, seqlen_k]:
// bottom-right causal alignment, i.e. keys j <= i + seqlen_k - seqlen_q.
inline long long causal_key_end(long long i, long long seqlen_q, long long seqlen_k) {
  return i + seqlen_k - seqlen_q + 1;
}

}  // namespace flashbox::cpu
