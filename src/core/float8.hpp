// FP8 e4m3 ("e4m3fn", OCP FP8 and the Hopper tensor cores' E4M3): 1 sign, 4 exponent bits (bias 7), 3
// mantissa bits, no infinities; exponent 15 with mantissa 7 is NaN, so the largest finite value is
// 448 = 1.75 * 2^8 and the smallest subnormal 2^-9. Conversions from fp32 round to nearest, ties to
// even (what cvt.rn.satfinite.e4m3x2.f32 does); a value past 448 becomes 448 with the sign kept
// (Overflow::saturate, the GPU's satfinite and FlashAttention-3's P quantisation) or NaN
// (Overflow::nan, PyTorch's float8_e4m3fn cast). NaN stays NaN. Header only, so the CPU reference of
// the FP8 path and the tests round exactly as one.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace flashbox::core {

inline constexpr float kE4m3Max = 448.0f;

enum class Overflow { saturate, nan };

inline float e4m3_to_float(uint8_t v) {
  const bool neg = v & 0x80u;
  const uint32_t exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  float mag;
  if (exp == 0xfu && mant == 0x7u) {
    mag = NAN;
  } else if (exp == 0) {
    mag = float(mant) * 0.001953125f;  // subnormal: mant * 2^-9
  } else {
    mag = std::ldexp(1.0f + float(mant) / 8.0f, int(exp) - 7);
  }
  return neg ? -mag : mag;
}

inline uint8_t float_to_e4m3(float f, Overflow overflow = Overflow::saturate) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint8_t sign = uint8_t((x >> 24) & 0x80u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);  // NaN
  float mag;
  std::memcpy(&mag, &a, sizeof mag);
  // Past the largest finite value after rounding: above 464, the midpoint of 448 and 480, the nearest
  // code is 480 (exponent 15, mantissa 7: NaN); 464 itself rounds to even, 448.
  if (mag > 464.0f) return overflow == Overflow::saturate ? uint8_t(sign | 0x7eu) : uint8_t(sign | 0x7fu);
  if (mag < 0.0009765625f) {  // below 2^-10 (half the smallest subnormal): +-0, ties (2^-10) to even 0
    return sign;
  }
  int e;
  std::frexp(mag, &e);  // mag = m * 2^e, m in [0.5, 1)
  // The value's exponent as e4m3 counts it (1.f * 2^(e - 1)); below the normal range the subnormal
  // step 2^-9 applies.
  const int exp = e - 1;
  const float step = exp < -6 ? 0.001953125f : std::ldexp(1.0f, exp - 3);  // the spacing of codes here
  const float q = mag / step;                                               // exact (a power-of-two divide)
  float n = std::nearbyint(q);  // the current rounding mode is round-to-nearest-even
  // n in [0, 16]: a subnormal count (n = 8 is the smallest normal) or 8..16 mantissa steps (16 carries
  // into the next exponent).
  uint32_t code;
  if (exp < -6) {
    code = uint32_t(n);  // 0..8; 8 = 0x08, the smallest normal (exp field 1, mantissa 0): same bits
  } else {
    const int biased = exp + 7;
    code = (uint32_t(biased) << 3) + uint32_t(n) - 8u;  // n = 16 carries into the exponent field
  }
  return uint8_t(sign | code);
}

}  // namespace flashbox::core
