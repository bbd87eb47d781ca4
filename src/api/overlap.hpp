// Exact test of whether two strided views share a byte: the alias rule of the C API (an output may
// not share an element with an input or with another output) decided per element set, not by
// address range, so that interleaved outputs such as dq/dk/dv = dqkv[:, :, 0/1/2] are accepted.
//
// A view is the byte set  { base + sum_i idx_i * stride_i + t : 0 <= idx_i < extent_i, 0 <= t < run }
// (a [batch, seq, heads, head_dim] tensor: three dims with byte strides and a run of head_dim
// elements; an lse buffer: no dims and one run). Two views X, Y share a byte iff integers exist with
//     sum_i a_i s_i - sum_j b_j r_j  in  [dY - runX + 1, dY + runY - 1],   dY = baseY - baseX,
// a bounded linear problem. It is solved exactly by
//   1. merging terms of equal stride (s*a - s*b = s*w with w over the whole interval
//      [-(nb-1), na-1]; every integer of a sum of integer intervals is reached, so this is exact),
//   2. a depth-first search over the merged terms, largest stride first, where each term's value
//      range is cut to what the remaining terms (whose sum lies in a known interval) can still bring
//      into the target. Nothing feasible is ever cut, so the answer is exact.
// For the views callers pass (each view nested: every stride at least the span of the smaller
// ones, as validate_tensor requires) equal strides merge and each level leaves one to three
// values: packed QKV/KV, BTHD/BHTD and slices are decided in a few dozen steps. Views whose strides
// are unrelated can need many steps (the general problem is NP-hard); past `budget` steps the
// answer is the conservative one: `overlap = true, exact = false` (the call is refused, and the
// message says the test gave up).
#pragma once
#include <cstdint>

namespace flashbox::detail {

struct ByteView {
  uintptr_t base = 0;   // address of the first byte
  int64_t run = 1;      // bytes of each contiguous run (>= 1)
  int ndims = 0;        // 0..4
  int64_t stride[4]{};  // bytes, > 0
  int64_t extent[4]{};  // >= 1
};

struct OverlapAnswer {
  bool overlap;  // true: the views share a byte (or, when !exact, they might)
  bool exact;    // false: the search stopped after `budget` steps and answered conservatively
};

inline constexpr int64_t kOverlapSearchBudget = int64_t(1) << 20;

OverlapAnswer views_overlap(const ByteView &x, const ByteView &y, int64_t budget = kOverlapSearchBudget);

}  // namespace flashbox::detail
