// The LSE merge of two partial attention results for one query row, shared by the CPU loop and the
// CUDA kernel (host and device).
//
// A partial result over key set K_i is (O_i, L_i) with L_i = log sum_{j in K_i} exp(s_j) and
// O_i = sum_j exp(s_j - L_i) v_j. Over K_1 u K_2 (disjoint): L = log(e^L1 + e^L2) and
// O = e^(L1-L) O_1 + e^(L2-L) O_2, exactly. With m = max(L1, L2) and d = |L1 - L2|:
//   L = m + log1p(e^-d),  w_big = 1 / (1 + e^-d),  w_small = e^-d / (1 + e^-d)
// (no overflow, and log1p keeps the small term's digits). A row that saw no key has L = -inf and
// weight 0: its O is never read (so garbage there cannot leak in); both empty gives O = 0, L = -inf,
// the C API's convention. A NaN LSE gives NaN weights, so a NaN never turns into a plausible number.
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define FLASHBOX_CP_HD __host__ __device__
#else
#define FLASHBOX_CP_HD
#endif

namespace flashbox::cp {

struct MergeWeights {
  float w1, w2, lse;  // O = w1 * O1 + w2 * O2 (a term with weight 0 is left out), L = lse
};

FLASHBOX_CP_HD inline MergeWeights merge_weights(float l1, float l2) {
  if (l1 != l1 || l2 != l2) return {NAN, NAN, NAN};
  if (l1 == -INFINITY && l2 == -INFINITY) return {0.0f, 0.0f, -INFINITY};
  if (l2 == -INFINITY) return {1.0f, 0.0f, l1};
  if (l1 == -INFINITY) return {0.0f, 1.0f, l2};
  const bool first_big = l1 >= l2;
  const float m = first_big ? l1 : l2;
  const float e = expf(-(first_big ? l1 - l2 : l2 - l1));  // in (0, 1]
  const float big = 1.0f / (1.0f + e), small = e / (1.0f + e);
  return first_big ? MergeWeights{big, small, m + log1pf(e)} : MergeWeights{small, big, m + log1pf(e)};
}

// One element: the weighted sum, a zero weight leaving its term out.
FLASHBOX_CP_HD inline float merge_value(const MergeWeights &w, float o1, float o2) {
  float r = 0.0f;
  if (w.w1 != 0.0f) r += w.w1 * o1;
  if (w.w2 != 0.0f) r += w.w2 * o2;
  return r;
}

}  // namespace flashbox::cp
