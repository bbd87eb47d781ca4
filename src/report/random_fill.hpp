// Seeded random tensors for the experiments: standard normal values (like torch.randn), never zeros,
// rounded to the tensor's dtype. Each element is a pure function of (seed, stream, index), so filling
// is parallel and the same seed gives the same tensor on every machine and thread count.
#pragma once
#include "flashbox/flashbox.h"

#include <cstdint>

namespace flashbox::report {

// Writes `count` elements of `dtype` at `dst`. `stream` tells tensors apart under one seed (q, k, v...).
void fill_random_normal(void *dst, flashbox_dtype dtype, int64_t count, uint64_t seed, uint64_t stream);

}  // namespace flashbox::report
