// Masks and score transforms of one attention call, in FlashAttention-2's semantics: the one
// definition every level uses (the fp64 references, the CPU naive/blocked forward and backward, and
// later the CUDA kernels and the KV-cache entry point), so that they cannot drift apart.
//
// For query row i of a sequence with seqlen_q queries and seqlen_k keys, let shift = seqlen_k -
// seqlen_q (bottom-right alignment: the last query sits on the last key). Then
//   visible keys   j with  i + shift - left <= j <= i + shift + right, clamped to [0, seqlen_k);
//                  left/right = -1 mean unbounded on that side; causal means right = 0;
//                  chunk > 0 (attention_chunk) intersects that with the keys of the row's chunk:
//                  c <= j < c + chunk, c = floor((i + shift) / chunk) * chunk;
//                  a row that sees no key gets O = 0, LSE = -inf and no gradient.
//   split s of n   (the forward's num_splits) keys [s * part, min((s + 1) * part, seqlen_k)) only,
//                  part = ceil(seqlen_k / n): one part of a split-key attention, combined later.
//   sink           a learnable sink logit per query head (FlashAttention-4's learnable_sink, in the
//                  units of s) joins every row's softmax denominator as a column with no value:
//                  LSE = log(sum_j exp(s_j) + exp(sink)), O = sum_j exp(s_j - LSE) v_j; a row that
//                  sees no key then has O = 0 and LSE = sink. Its gradient is
//                  dsink = -sum over rows of exp(sink - LSE) * (dO . O).
//   score          s = scale * q_i . k_j
//                  softcap > 0:  s = softcap * tanh(s / softcap)       (after the scale)
//                  ALiBi slope:  s = s - slope * |i + shift - j|        (after the softcap)
// The backward multiplies dS by the softcap's derivative d(cap tanh(x/cap))/dx = 1 - (s_c/cap)^2,
// where s_c is the capped score before the ALiBi bias; the bias has no gradient.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace flashbox::core {

struct ScoreMods {
  int64_t window_left = -1, window_right = -1;  // -1: unbounded; with causal, window_right is 0
  float softcap = 0.0f;                         // 0: off
  const float *alibi_slopes = nullptr;          // fp32 [heads_q] or [batch, heads_q]; null: off
  int64_t alibi_batch_stride = 0;               // elements between batches' slopes (0: shared)
  int64_t chunk = 0;                            // attention_chunk: 0 off, else the chunk's keys
  const float *sinks = nullptr;                 // fp32 [heads_q] sink logits; null: none
  int64_t split = 0, splits = 1;                // this call computes key part `split` of `splits`

  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  // The slope of (batch b, query head h), 0 without ALiBi.
  float slope(int64_t b, int64_t h) const { return alibi_slopes ? alibi_slopes[b * alibi_batch_stride + h] : 0.0f; }
  // The sink logit of query head h, -inf without sinks (exp(-inf) = 0: no sink).
  float sink(int64_t h) const { return sinks ? sinks[h] : -INFINITY; }
};

// Mods of a call with only the fixed-length causal flag (the original C API).
inline ScoreMods causal_mods(bool causal) {
  ScoreMods m;
  if (causal) m.window_right = 0;
  return m;
}

// floor(x / n) * n for n > 0 and any sign of x: the first position of x's chunk.
inline int64_t chunk_start(int64_t x, int64_t n) {
  const int64_t r = x % n;
  return x - (r < 0 ? r + n : r);
}

// The keys of the call's split: [split_begin, split_end) (all of them with one split).
inline int64_t split_begin(const ScoreMods &m, int64_t seqlen_k) {
  return m.splits <= 1 ? 0 : std::min(seqlen_k, m.split * ((seqlen_k + m.splits - 1) / m.splits));
}
inline int64_t split_end(const ScoreMods &m, int64_t seqlen_k) {
  return m.splits <= 1 ? seqlen_k : std::min(seqlen_k, (m.split + 1) * ((seqlen_k + m.splits - 1) / m.splits));
}

// First visible key of row i (clamped to [0, seqlen_k]).
inline int64_t key_begin(const ScoreMods &m, int64_t i, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t pos = i + seqlen_k - seqlen_q;
  int64_t begin = m.window_left < 0 ? 0 : pos - m.window_left;
  if (m.chunk > 0) begin = std::max(begin, chunk_start(pos, m.chunk));
  begin = std::max(begin, split_begin(m, seqlen_k));
  return std::clamp<int64_t>(begin, 0, seqlen_k);
}
// One past the last visible key of row i (clamped to [0, seqlen_k]); key_end <= key_begin: no key.
inline int64_t key_end(const ScoreMods &m, int64_t i, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t pos = i + seqlen_k - seqlen_q;
  int64_t end = m.window_right < 0 ? seqlen_k : pos + m.window_right + 1;
  if (m.chunk > 0) end = std::min(end, chunk_start(pos, m.chunk) + m.chunk);
  end = std::min(end, split_end(m, seqlen_k));
  return std::clamp<int64_t>(end, 0, seqlen_k);
}
// The rows that see key j: [query_begin, query_end) (clamped to [0, seqlen_q]), the transpose of
// the two functions above, for the backward's walk over K/V blocks. Both bounds never decrease with
// j (and key_begin / key_end never decrease with i), which the blocked levels rely on. A split (the
// forward's num_splits) is not in them: the backward takes no split.
inline int64_t query_begin(const ScoreMods &m, int64_t j, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t shift = seqlen_k - seqlen_q;
  int64_t begin = m.window_right < 0 ? 0 : j - shift - m.window_right;
  if (m.chunk > 0) begin = std::max(begin, chunk_start(j, m.chunk) - shift);
  return std::clamp<int64_t>(begin, 0, seqlen_q);
}
inline int64_t query_end(const ScoreMods &m, int64_t j, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t shift = seqlen_k - seqlen_q;
  int64_t end = m.window_left < 0 ? seqlen_q : j - shift + m.window_left + 1;
  if (m.chunk > 0) end = std::min(end, chunk_start(j, m.chunk) + m.chunk - shift);
  return std::clamp<int64_t>(end, 0, seqlen_q);
}

// The score transform after the scale: softcap, then the ALiBi bias (slope 0: none). Templated on
// the precision so the fp64 references and the fp32 levels share it.
template <class F>
inline F capped_score(F s, F softcap) {
  return softcap > F(0) ? softcap * std::tanh(s / softcap) : s;
}
template <class F>
inline F alibi_bias(F slope, int64_t i, int64_t j, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t rel = i + seqlen_k - seqlen_q - j;
  return -slope * F(rel < 0 ? -rel : rel);
}
// d(capped)/d(s) expressed through the capped score: 1 - (capped / softcap)^2 (1 without softcap).
template <class F>
inline F softcap_grad(F capped, F softcap) {
  if (!(softcap > F(0))) return F(1);
  const F t = capped / softcap;
  return F(1) - t * t;
}

}  // namespace flashbox::core
