// FP8 e4m3 cache bytes to the 16-bit mma.sync operands of the decode kernel, and back (the append).
//
// Load side, exact and the same on sm_80 and sm_90: an e4m3 byte s.eeee.mmm placed as the fp16 bit
// pattern s.0eeee.mmm0000000 is the fp16 number e4m3 * 2^-8, for normals (exponent bias 7 against
// 15: 2^-8) and subnormals alike (fp16 subnormal 2^-14 * 0.mmm against e4m3's 2^-6 * 0.mmm: 2^-8 too),
// so a pair costs a byte permute and two logic ops, no conversion instruction. The 2^8 is folded into
// the descales (score scale, output scale). For bf16 (Q K^T with bf16 q) the same move into bf16's bits
// (s.0000eeee.mmm0000) is e4m3 * 2^-120, subnormals included (2^-126 * 0.mmm), and one bf16x2
// multiply by 2^112 (exact: a power of two, the result normal) gives e4m3 * 2^-8 as well: four cheap
// instructions a pair instead of three conversions through fp32. bf16 arithmetic keeps subnormal
// inputs (PTX has no .ftz for bf16; the build's fast math flushes fp32 only); the test
// Fp8KvcacheCudaShapes.SubnormalCodes would show a flush as a wrong result.
// An e4m3 NaN code (0x7f, 0xff) reads as +-480 * descale here (the CPU reads NaN); an append never
// writes one from a finite value.
// Store side: x / descale (correctly rounded, __fdiv_rn), then cvt.rn.satfinite to e4m3 through
// cuda_fp8.h (__nv_cvt_float2_to_fp8x2: round to nearest even, +-448 past the range).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace flashbox::cuda::decode {

// What the 16-bit values of a converted row are worth: e4m3 value * kFp8RowScale.
constexpr float kFp8RowScale = 1.0f / 256.0f;

// The 16-bit pair from `t`, whose bytes 1 and 3 are two e4m3 codes (bytes 0 and 2 are ignored): as
// an fp16x2 of e4m3 * 2^-8 (byte 1 -> low half).
__device__ __forceinline__ uint32_t e4m3_bytes13_to_half2_scaled(uint32_t t) {
  return (t & 0x80008000u) | ((t >> 1) & 0x3f803f80u);
}

// The same pair as a bf16x2 of e4m3 * 2^-8 (exact: see above).
__device__ __forceinline__ uint32_t e4m3_bytes13_to_bf162_scaled(uint32_t t) {
  const uint32_t tiny = (t & 0x80008000u) | ((t >> 4) & 0x07f007f0u);  // e4m3 * 2^-120
  __nv_bfloat162 b;
  __builtin_memcpy(&b, &tiny, 4);
  const uint32_t k2pow112_bits = 0x77807780u;  // bf16 2^112 in each half: exponent 239, mantissa 0
  __nv_bfloat162 k2pow112;
  __builtin_memcpy(&k2pow112, &k2pow112_bits, 4);
  const __nv_bfloat162 r = __hmul2(b, k2pow112);
  uint32_t out;
  __builtin_memcpy(&out, &r, 4);
  return out;
}

// Bytes 0, 1 (kHi = false) or 2, 3 (kHi = true) of `w` as a 16-bit pair of T's kind (fp16x2 or
// bf16x2) worth e4m3 * 2^-8, the lower byte in the low half: one byte permute, then the moves above.
template <bool kToBf16, bool kHi>
__device__ __forceinline__ uint32_t e4m3x2_to_16bit_scaled(uint32_t w) {
  const uint32_t t = __byte_perm(w, w, kHi ? 0x3322u : 0x1100u);  // bytes 1 and 3 carry the codes
  return kToBf16 ? e4m3_bytes13_to_bf162_scaled(t) : e4m3_bytes13_to_half2_scaled(t);
}

// Byte kByte of `a` (low half) and of `b` (high half) as an fp16x2 of e4m3 * 2^-8: the same column of
// two cache rows, one byte permute and the moves above.
template <int kByte>
__device__ __forceinline__ uint32_t e4m3_column_pair_to_half2_scaled(uint32_t a, uint32_t b) {
  constexpr uint32_t kSel = ((4u + kByte) << 12) | ((4u + kByte) << 8) | (uint32_t(kByte) << 4) | uint32_t(kByte);
  return e4m3_bytes13_to_half2_scaled(__byte_perm(a, b, kSel));
}

// Two values into e4m3 (x in the low byte): x / descale rounded to nearest even, saturated; 0 for a
// descale of 0 (core/kvcache_rules.hpp).
__device__ __forceinline__ uint16_t quantize_e4m3x2(float x, float y, float descale) {
  const float2 q = descale == 0.0f ? make_float2(0.0f, 0.0f) : make_float2(__fdiv_rn(x, descale), __fdiv_rn(y, descale));
  return uint16_t(__nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, __NV_E4M3));
}

}  // namespace flashbox::cuda::decode
