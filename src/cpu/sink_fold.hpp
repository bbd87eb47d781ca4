// A learnable sink in a row's online softmax: one more term of the denominator, with no value,
// joined after the row's keys. With the row's running max m, sum l and unnormalised output acc (in
// the base of `exp`: std::exp for natural-log scores, exp2 for base-2 ones), the max moves to
// m' = max(m, sink) first, so that neither exponential overflows:
//   l' = l * exp(m - m') + exp(sink - m'),   acc' = acc * exp(m - m').
// A row that saw no key (m = -inf, l = 0, acc = 0) gets l' = 1 and acc' = 0: o = 0, lse = the sink.
// The naive level and the fp64 references take the sink into the max before the keys instead (they
// see the whole row at once); the CUDA kernels fold it at finalisation as here (cuda/common/sink.cuh).
#pragma once
#include <algorithm>
#include <cstdint>

namespace flashbox::cpu {

template <class Exp>
inline void fold_sink(float sink, float &m, float &l, float *acc, int64_t n, Exp exp) {
  const float m_new = std::max(m, sink), alpha = exp(m - m_new);  // 0 when m = -inf
  l = l * alpha + exp(sink - m_new);
  for (int64_t x = 0; x < n; ++x) acc[x] *= alpha;
  m = m_new;
}

}  // namespace flashbox::cpu
