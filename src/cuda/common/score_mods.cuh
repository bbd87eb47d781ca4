// The extension's masks and score transforms on the device: the same rules as core/masks.hpp (the
// one definition of their semantics; read it first), in a form a kernel keeps in registers. Every
// flash family (sm80, sm90, forward and backward) uses these functions so that the kernels cannot
// drift from the CPU references.
//
// A kernel works on one sequence at a time with shift = seqlen_k - seqlen_q (bottom-right
// alignment). Row i sees key j iff  i + shift - left <= j <= i + shift + right  (left/right < 0:
// unbounded). Tiles entirely outside [key_begin(first row), key_end(last row)) are skipped, so a
// window costs work only where it is visible. The transforms, in order, on s = scale * q.k:
//   softcap > 0:   s = softcap * tanh(s / softcap)
//   ALiBi:         s = s - slope * |i + shift - j|
// and the backward multiplies dS by 1 - (s_capped / softcap)^2 (the ALiBi bias has no gradient).
#pragma once
#include <cstdint>

#include "core/masks.hpp"

namespace flashbox::cuda {

struct DeviceMods {
  int window_left = -1, window_right = -1;  // -1: unbounded (causal is window_right = 0)
  float softcap = 0.0f;                     // 0: off
  float softcap_inv = 0.0f;                 // 1 / softcap (0 when off)
  const float *alibi_slopes = nullptr;      // fp32 [heads_q] or rows of alibi_batch_stride; null: off
  int64_t alibi_batch_stride = 0;

  __host__ __device__ bool windowed() const { return window_left >= 0 || window_right >= 0; }
  __host__ __device__ bool capped() const { return softcap > 0.0f; }
  __host__ __device__ bool alibi() const { return alibi_slopes != nullptr; }
};

inline DeviceMods device_mods(const core::ScoreMods &m) {
  DeviceMods d;
  d.window_left = int(m.window_left < 0 ? -1 : m.window_left);
  d.window_right = int(m.window_right < 0 ? -1 : m.window_right);
  d.softcap = m.softcap;
  d.softcap_inv = m.softcap > 0.0f ? 1.0f / m.softcap : 0.0f;
  d.alibi_slopes = m.alibi_slopes;
  d.alibi_batch_stride = m.alibi_batch_stride;
  return d;
}

// First visible key of row i, clamped to [0, seqlen_k].
__device__ __forceinline__ int mods_key_begin(const DeviceMods &m, int i, int shift, int seqlen_k) {
  if (m.window_left < 0) return 0;
  return min(max(i + shift - m.window_left, 0), seqlen_k);
}
// One past the last visible key of row i, clamped to [0, seqlen_k].
__device__ __forceinline__ int mods_key_end(const DeviceMods &m, int i, int shift, int seqlen_k) {
  if (m.window_right < 0) return seqlen_k;
  return min(max(i + shift + m.window_right + 1, 0), seqlen_k);
}
// The query rows that see key j: [begin, end), clamped to [0, seqlen_q] (the backward's walk).
__device__ __forceinline__ int mods_query_begin(const DeviceMods &m, int j, int shift, int seqlen_q) {
  if (m.window_right < 0) return 0;
  return min(max(j - shift - m.window_right, 0), seqlen_q);
}
__device__ __forceinline__ int mods_query_end(const DeviceMods &m, int j, int shift, int seqlen_q) {
  if (m.window_left < 0) return seqlen_q;
  return min(max(j - shift + m.window_left + 1, 0), seqlen_q);
}
__device__ __forceinline__ bool mods_visible(const DeviceMods &m, int i, int j, int shift) {
  const int d = j - i - shift;  // key position relative to the row's diagonal
  return (m.window_left < 0 || d >= -m.window_left) && (m.window_right < 0 || d <= m.window_right);
}

// The slope of (batch b, query head h); 0 without ALiBi.
__device__ __forceinline__ float mods_slope(const DeviceMods &m, int64_t b, int h) {
  return m.alibi_slopes ? m.alibi_slopes[b * m.alibi_batch_stride + h] : 0.0f;
}

// tanh by the hardware's approximation (tanh.approx.f32, sm_75+: one MUFU op, maximum relative error
// about 2^-11; FlashAttention-2's and -3's softcap use it too).
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Softcap of a scaled score s (natural units): cap * tanh(s / cap), by tanh_approx as in every kernel
// that caps scores for a backward (the sm90 forward and backward, the sm80 forward and backward): a
// backward recomputes P from the forward's LSE, so both passes must compute the same capped score,
// also when they run on different families (an sm90 forward with the sm80 backward: variable-length
// or deterministic calls above head_dim 128). tanhf against tanh.approx differs by up to cap * 2^-11
// in the exponent (about 2.4 % of P near a cap of 50).
__device__ __forceinline__ float mods_cap(const DeviceMods &m, float s) {
  return m.softcap * tanh_approx(s * m.softcap_inv);
}

// d(capped)/ds from the capped value: 1 - (capped / cap)^2.
__device__ __forceinline__ float mods_cap_grad(const DeviceMods &m, float capped) {
  const float t = capped * m.softcap_inv;
  return 1.0f - t * t;
}
// The ALiBi bias of (i, j): -slope * |i + shift - j|.
__device__ __forceinline__ float mods_alibi_bias(float slope, int i, int j, int shift) {
  return -slope * fabsf(float(i + shift - j));
}

}  // namespace flashbox::cuda
