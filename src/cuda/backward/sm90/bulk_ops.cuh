// The few sm_90a instructions the Hopper backward needs beyond the forward's (src/cuda/forward/sm90):
// the one-dimensional bulk copy from shared to global memory as an fp32 reduce-add (FA3's way of
// accumulating dQ), and the wgmma whose A and B are both MN-major.
#pragma once
#include <cstdint>

#include "cuda/hopper/async_copy.cuh"
#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90::bwd {

// dst[i] += src[i] for `bytes / 4` floats, element-wise atomic in global memory (one bulk group).
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, const void *src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// The source shared memory of every committed bulk group has been read (it may be rewritten).
__device__ __forceinline__ void bulk_wait_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Every committed bulk group has completed (before the CTA exits).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// D (64 x 64, fp32) [+]= A (64 x 16) * B (16 x 64), A M-major and B N-major in shared memory
// (trans-a = trans-b = 1, allowed for 16-bit types): dQ = dS K with dS stored as dS^T.
template <class T>
__device__ __forceinline__ void wgmma_ss_mn_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#define FB_BWD_WGMMA_TT(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " FB_WGMMA_D32 ", %32, %33, p, 1, 1, 1, 1;\n}\n" \
      : FB_WGMMA_OUT32(d) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))
  if constexpr (is_bf16<T>)
    FB_BWD_WGMMA_TT("bf16");
  else
    FB_BWD_WGMMA_TT("f16");
#undef FB_BWD_WGMMA_TT
}

}  // namespace flashbox::sm90::bwd
