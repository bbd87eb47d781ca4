// Element access for the host loops (cpu_ops.cpp): fp32, fp16 and bf16 stored as raw bits, read as
// fp32 and written back with round-to-nearest-even, the rounding of the GPU's conversion
// instructions. fp16 goes through the ground floor's bit conversions (src/core/dtype.hpp: IEEE
// binary16, round to nearest even, subnormals and NaN included; the compiler's _Float16 is not
// available to every compiler CI uses, clang 14 on x86-64 among them); bf16 is the top half of an fp32.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::cp {

inline int64_t element_bytes(flashbox_dtype t) { return t == FLASHBOX_FLOAT32 ? 4 : 2; }

inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x0040u);  // NaN stays a quiet NaN
  const uint32_t rest = x & 0xffffu, kept = x >> 16;
  return uint16_t(kept + ((rest > 0x8000u || (rest == 0x8000u && (kept & 1u))) ? 1u : 0u));
}

inline float load_element(const void *base, flashbox_dtype t, int64_t i) {
  switch (t) {
    case FLASHBOX_FLOAT16: return cpu::half_to_float(static_cast<const uint16_t *>(base)[i]);
    case FLASHBOX_BFLOAT16: return bf16_bits_to_float(static_cast<const uint16_t *>(base)[i]);
    default: return static_cast<const float *>(base)[i];
  }
}

inline void store_element(void *base, flashbox_dtype t, int64_t i, float v) {
  switch (t) {
    case FLASHBOX_FLOAT16: static_cast<uint16_t *>(base)[i] = cpu::float_to_half(v); break;
    case FLASHBOX_BFLOAT16: static_cast<uint16_t *>(base)[i] = float_to_bf16_bits(v); break;
    default: static_cast<float *>(base)[i] = v; break;
  }
}

}  // namespace flashbox::cp
