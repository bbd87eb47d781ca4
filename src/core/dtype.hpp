// Host-side element types: fp16 and bf16 are stored as raw uint16_t bit patterns and converted to and
// from fp32 with round-to-nearest-even, the rounding the GPU's conversion instructions use; fp8 e4m3
// (an input-only dtype of the extension) is one byte, converted by core/float8.hpp (stores saturate). Header
// only so that the CPU levels, the tests, GPT-2 and the benchmarks all round the same way.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/float8.hpp"
#include "flashbox/flashbox.h"
#include "flashbox/flashbox.hpp"

namespace flashbox::cpu {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // Subnormal (or zero): mant * 2^-24, exact in fp32.
    const float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// Rounds `v` to the nearest value with `shift` fewer low bits, ties to even.
inline uint32_t round_shift_rne(uint32_t v, uint32_t shift) {
  const uint32_t kept = v >> shift;
  const uint32_t rest = v & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN stays (quiet) NaN
  if (a >= 0x47800000u) return uint16_t(sign | 0x7c00u);  // >= 65536 (or inf): inf
  const int exp = int(a >> 23) - 127;
  if (exp >= -14) {
    // Normal half: drop 13 mantissa bits. A carry out of the mantissa bumps the exponent, and
    // from the largest exponent it lands exactly on inf (0x7c00), which is the correct rounding.
    const uint32_t biased = (uint32_t(exp + 15) << 23) | (a & 0x7fffffu);
    return uint16_t(sign | round_shift_rne(biased, 13));
  }
  if (exp < -25) return uint16_t(sign);  // below half the smallest subnormal: +-0
  // Subnormal half: the value in units of 2^-24 is the 24-bit significand shifted right.
  const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
  return uint16_t(sign | round_shift_rne(significand, uint32_t(-(exp + 1))));
}

// bfloat16: the top 16 bits of an fp32.
inline float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x0040u);  // quiet NaN
  return uint16_t(round_shift_rne(x, 16));  // a carry into the exponent rounds up to inf correctly
}

// Bytes per element and the short name ("fp32", "fp16", "bf16", "fp8_e4m3"): the public C++ layer's.
using flashbox::dtype_name;
using flashbox::dtype_size;

// The storage dtypes every call takes (fp8 e4m3 is not one: only the extension's forward and the
// KV cache of flashbox_attention_kvcache, through fields of their own, take it).
inline bool dtype_valid(int t) { return t == FLASHBOX_FLOAT32 || t == FLASHBOX_FLOAT16 || t == FLASHBOX_BFLOAT16; }

// Element `index` of a buffer of `t`, as fp32.
inline float load_as_float(const void *base, flashbox_dtype t, int64_t index) {
  switch (t) {
    case FLASHBOX_FLOAT16: return half_to_float(static_cast<const uint16_t *>(base)[index]);
    case FLASHBOX_BFLOAT16: return bf16_to_float(static_cast<const uint16_t *>(base)[index]);
    case FLASHBOX_FLOAT8_E4M3: return core::e4m3_to_float(static_cast<const uint8_t *>(base)[index]);
    default: return static_cast<const float *>(base)[index];
  }
}

// Stores `v` rounded to `t` at element `index`.
inline void store_from_float(void *base, flashbox_dtype t, int64_t index, float v) {
  switch (t) {
    case FLASHBOX_FLOAT16: static_cast<uint16_t *>(base)[index] = float_to_half(v); break;
    case FLASHBOX_BFLOAT16: static_cast<uint16_t *>(base)[index] = float_to_bf16(v); break;
    case FLASHBOX_FLOAT8_E4M3: static_cast<uint8_t *>(base)[index] = core::float_to_e4m3(v); break;
    default: static_cast<float *>(base)[index] = v; break;
  }
}

// `v` rounded to the precision of `t` (identity for fp32).
inline float round_to_dtype(float v, flashbox_dtype t) {
  switch (t) {
    case FLASHBOX_FLOAT16: return half_to_float(float_to_half(v));
    case FLASHBOX_BFLOAT16: return bf16_to_float(float_to_bf16(v));
    case FLASHBOX_FLOAT8_E4M3: return core::e4m3_to_float(core::float_to_e4m3(v));
    default: return v;
  }
}

// Converts `n` contiguous elements of `t` to fp32 (the tile loads of the CPU levels).
inline void load_row_as_float(const void *base, flashbox_dtype t, int64_t offset, int64_t n, float *out) {
  switch (t) {
    case FLASHBOX_FLOAT16: {
      const uint16_t *p = static_cast<const uint16_t *>(base) + offset;
      for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(p[i]);
      break;
    }
    case FLASHBOX_BFLOAT16: {
      const uint16_t *p = static_cast<const uint16_t *>(base) + offset;
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(p[i]);
      break;
    }
    case FLASHBOX_FLOAT8_E4M3: {
      const uint8_t *p = static_cast<const uint8_t *>(base) + offset;
      for (int64_t i = 0; i < n; ++i) out[i] = core::e4m3_to_float(p[i]);
      break;
    }
    default: std::memcpy(out, static_cast<const float *>(base) + offset, size_t(n) * sizeof(float)); break;
  }
}

inline void store_row_from_float(void *base, flashbox_dtype t, int64_t offset, int64_t n, const float *in) {
  switch (t) {
    case FLASHBOX_FLOAT16: {
      uint16_t *p = static_cast<uint16_t *>(base) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_half(in[i]);
      break;
    }
    case FLASHBOX_BFLOAT16: {
      uint16_t *p = static_cast<uint16_t *>(base) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(in[i]);
      break;
    }
    case FLASHBOX_FLOAT8_E4M3: {
      uint8_t *p = static_cast<uint8_t *>(base) + offset;
      for (int64_t i = 0; i < n; ++i) p[i] = core::float_to_e4m3(in[i]);
      break;
    }
    default: std::memcpy(static_cast<float *>(base) + offset, in, size_t(n) * sizeof(float)); break;
  }
}

}  // namespace flashbox::cpu
