// A learnable sink (flashbox_attention_ext.learnable_sink; core/masks.hpp has its semantics) in a
// flash forward's finalisation. The sink is one more column of the row's softmax denominator with no
// value, so it changes only the row's sum and max at the end: the K/V loop runs as without it.
// Both forward families keep a row's running max m and sum l in base 2 (l = sum_j exp2(x_j - m),
// x_j the score times log2 e, m = -inf while the row has seen no key); the sink joins them as
// exp2(sink2 - m) with sink2 = sink * log2 e.
#pragma once
#include <cmath>

namespace flashbox::cuda {

// Folds the sink into a finished row (l summed over the whole row): the max moves to
// max(m, sink2) first, so neither exponential overflows whatever the sink's size. Returns the factor
// by which O, accumulated against the old m, is rescaled before it is divided by the new l (0 for a
// row that saw no key: O = 0, and l = 1, m = sink2, so LSE = the sink). A row with neither a key nor
// a finite sink is left empty (m = -inf, l = 0).
__device__ __forceinline__ float fold_sink(float &m, float &l, float sink2) {
  const float top = fmaxf(m, sink2);
  if (top == -INFINITY) return 1.f;
  const float alpha = exp2f(m - top);  // exp2(-inf) = 0 while the row saw no key
  l = l * alpha + exp2f(sink2 - top);
  m = top;
  return alpha;
}

}  // namespace flashbox::cuda
