// 2^x for x <= 0 in a form the compiler can vectorise (std::exp2 is a library call per element).
// x = k + f with k = round(x) and f in [-0.5, 0.5]; 2^f from its Taylor series to degree 7
// (truncation error below 1e-8, under fp32 rounding), then 2^k added into the exponent bits.
// Inputs below -125 (including -inf from masking) give exactly 0.
#pragma once
#include <cstdint>
#include <cstring>

namespace flashbox::cpu {

inline float exp2_nonpositive(float x) {
  const bool underflow = !(x >= -125.0f);  // also true for NaN-free -inf
  const float xc = underflow ? -125.0f : x;
  const int k = int(xc + 128.5f) - 128;  // the argument is positive, so int() truncation is floor
  const float f = xc - float(k);
  // Taylor coefficients ln(2)^n / n!.
  float p = 1.5252733804059840e-05f;
  p = p * f + 1.5403530393381606e-04f;
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.6181291076284772e-03f;
  p = p * f + 5.5504108664821580e-02f;
  p = p * f + 2.4022650695910071e-01f;
  p = p * f + 6.9314718055994531e-01f;
  p = p * f + 1.0f;
  uint32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += uint32_t(k) << 23;
  float r;
  std::memcpy(&r, &bits, 4);
  return underflow ? 0.0f : r;
}

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // 32-byte vectors in inline code; no ABI boundary is crossed
// The same function on 8 lanes with GCC/Clang vector extensions (AVX2 where the caller is compiled
// for it): the softmax loops call this explicitly because the compiler will not vectorise the
// scalar version's bit manipulation on its own.
typedef float exp2_vec8 __attribute__((vector_size(32)));
typedef int32_t exp2_vec8i __attribute__((vector_size(32)));

inline exp2_vec8 exp2_nonpositive(exp2_vec8 x) {
  const exp2_vec8i underflow = !(x >= -125.0f);
  const exp2_vec8 xc = underflow ? exp2_vec8{} - 125.0f : x;
  const exp2_vec8i k = __builtin_convertvector(xc + 128.5f, exp2_vec8i) - 128;
  const exp2_vec8 f = xc - __builtin_convertvector(k, exp2_vec8);
  exp2_vec8 p = f * 1.5252733804059840e-05f + 1.5403530393381606e-04f;
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.6181291076284772e-03f;
  p = p * f + 5.5504108664821580e-02f;
  p = p * f + 2.4022650695910071e-01f;
  p = p * f + 6.9314718055994531e-01f;
  p = p * f + 1.0f;
  const exp2_vec8 r = (exp2_vec8)((exp2_vec8i)p + (k << 23));
  return underflow ? exp2_vec8{} : r;
}
#pragma GCC diagnostic pop
#endif

}  // namespace flashbox::cpu
