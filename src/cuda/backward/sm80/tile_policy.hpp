// The sm80 backward's run-time tile choice, in one place: the query rows per step of the dK/dV
// kernel. The other shapes are compile-time traits of each head_dim's instantiation. Host-only; the
// one input besides the problem is the private tuning override sm80_bwd_block_q (core/tuning.hpp:
// benchmarks and tests), at its default in every other call.
#pragma once
#include "core/problem.hpp"

namespace flashbox::sm80 {

// head_dim 64: 32 query rows per step (two CTAs per SM; H200, T = 16384: 201 TFLOP/s against 170
// with 64); every other head_dim: 64. `kernel_dim` is the instantiation's head_dim.
inline int bwd_block_q(const detail::Problem &p, int kernel_dim) {
  return kernel_dim == 64 && p.tuning.overrides.sm80_bwd_block_q != 64 ? 32 : 64;
}

}  // namespace flashbox::sm80
