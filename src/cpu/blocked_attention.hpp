// The CPU FlashAttention-2 loop with a chosen tile shape (the API runs 64 x 64; tools and tests may
// ask for others to show that the result does not depend on the tiling).
#pragma once
#include "core/problem.hpp"

namespace flashbox::detail {

// A problem validated by the API (src/api/validate.cpp). 1 <= block_m, block_n <= 256.
int cpu_blocked_forward_tiles(const Problem &a, int block_m, int block_n);

}  // namespace flashbox::detail
