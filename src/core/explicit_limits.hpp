// The head dims the CUDA explicit forward takes (src/cuda/explicit), for the API's validation and the
// kernel alike: MLA's 576 query/key columns (512 latent + 64 rotary, FlashMLA's) and 512 value
// columns, both multiples of 8 (the kernel stages rows with 16-byte loads). No CUDA types here, so
// validation compiles in every build.
#pragma once

namespace flashbox::detail::cuda_explicit_limits {

inline constexpr int kMaxHeadDim = 576;
inline constexpr int kMaxHeadDimV = 512;

}  // namespace flashbox::detail::cuda_explicit_limits
