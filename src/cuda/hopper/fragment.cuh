// The wgmma accumulator fragment by name (docs/hopper.md §2.6). For a 64 x N fp32 accumulator, thread
// (warp w, lane = 4g + q) of the warpgroup holds N/2 registers; register i holds
//   row    16w + g + 8 * acc_half(i)        (each thread owns two rows, "halves" 0 and 1)
//   column acc_col(i) + 2q = 8 * acc_group(i) + (i & 1) + 2q
// so a row is spread over the four lanes of a quad, and consecutive register pairs (i & 1) are
// neighbouring columns. The softmax, the masks and the backward's P^T / dS^T code read positions
// through these names instead of shifting bits in place.
#pragma once

namespace flashbox::sm90 {

// Which of the thread's two rows register i belongs to (0: row g, 1: row g + 8).
__host__ __device__ __forceinline__ constexpr int acc_half(int i) { return (i >> 1) & 1; }
// Which 8-column group register i lies in.
__host__ __device__ __forceinline__ constexpr int acc_group(int i) { return i >> 2; }
// Column of register i relative to the thread's first column (2q).
__host__ __device__ __forceinline__ constexpr int acc_col(int i) { return 8 * (i >> 2) + (i & 1); }

}  // namespace flashbox::sm90
