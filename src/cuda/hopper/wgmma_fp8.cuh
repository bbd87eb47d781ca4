// FP8 (e4m3) warpgroup products: wgmma.mma_async m64nNk32.f32.e4m3.e4m3 (sm_90a).
//
// One k-step is 32 e4m3 values = 32 bytes, the same bytes per k-step as an m64nNk16 bf16 product, so a
// 128B-swizzled panel (128-byte rows) holds four k-steps and descriptors advance by 32 bytes per step
// as in wgmma.cuh. FP8 products take no transpose flags: both shared-memory operands are K-major (PTX
// ISA, "wgmma.mma_async": imm-trans-a/b exist only for .f16/.bf16). The register A fragment of an
// m64k32 fp8 product is 4 x b32 = 16 e4m3 values per thread: for thread (warp w, lane 4g + q),
//   a0: row 16w + g,     k 4q .. 4q+3        a1: row 16w + g + 8, k 4q .. 4q+3
//   a2: row 16w + g,     k 16+4q .. 16+4q+3  a3: row 16w + g + 8, k 16+4q .. 16+4q+3
// the lowest k in the lowest byte (PTX ISA, "Register fragments: wgmma .m64nNk32").
#pragma once
#include <cstdint>

#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90 {

// SS: D (64 x 128, fp32) [+]= A (64 x 32, smem, K-major) * B (32 x 128, smem, K-major).
__device__ __forceinline__ void wgmma_fp8_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " FB_WGMMA_D64 ", %64, %65, p, 1, 1;\n}\n"
      : FB_WGMMA_OUT64(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// RS: D (64 x 128, fp32) [+]= A (64 x 32, registers: the fragment above) * B (32 x 128, smem, K-major).
__device__ __forceinline__ void wgmma_fp8_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                  int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " FB_WGMMA_D64 ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : FB_WGMMA_OUT64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// Four fp32 values as one b32 of e4m3 (round to nearest even, saturating to +-448), v0 in the lowest
// byte. cvt.rn.satfinite.e4m3x2.f32 d, a, b puts a in the upper byte of its 16-bit result.
__device__ __forceinline__ uint32_t pack4_e4m3(float v0, float v1, float v2, float v3) {
  uint32_t lo, hi;
  asm("{\n.reg .b16 t;\ncvt.rn.satfinite.e4m3x2.f32 t, %2, %1;\ncvt.u32.u16 %0, t;\n}\n" : "=r"(lo) : "f"(v0), "f"(v1));
  asm("{\n.reg .b16 t;\ncvt.rn.satfinite.e4m3x2.f32 t, %2, %1;\ncvt.u32.u16 %0, t;\n}\n" : "=r"(hi) : "f"(v2), "f"(v3));
  return lo | (hi << 16);
}

}  // namespace flashbox::sm90
