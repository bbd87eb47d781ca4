// The softmax scale and the base-2 constant every level uses. Kernels compute exp(x) as
// exp2(x * log2 e), so the scale reaches them premultiplied: scale_log2 = scale * log2 e.
// Host and device code include this (constexpr only, no CUDA types).
#pragma once
#include <cmath>
#include <cstdint>

namespace flashbox {

inline constexpr double kLog2eDouble = 1.44269504088896340736;
inline constexpr float kLog2e = 1.44269504088896340736f;

// softmax_scale as the caller gave it, with 0 meaning 1/sqrt(head_dim), in fp32 (what every kernel
// multiplies by), and the same times log2 e rounded once from double.
struct SoftmaxScale {
  float scale, scale_log2;
};
inline SoftmaxScale resolve_softmax_scale(float softmax_scale, int64_t head_dim) {
  const double s = softmax_scale != 0.f ? double(softmax_scale) : 1.0 / std::sqrt(double(head_dim));
  return {float(s), float(s * kLog2eDouble)};
}

}  // namespace flashbox
