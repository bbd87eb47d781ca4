// The few sm_90a instructions the Hopper backward needs beyond the forward's (src/cuda/forward/sm90):
// the one-dimensional bulk copy from shared to global memory as an fp32 reduce-add (FA3's way of
// accumulating dQ), the wgmma whose A and B are both MN-major, and the d256 configuration's N = 32
// SS product and SS product with B N-major (N = 128; N = 192 for the d192 configuration).
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

// The products below are FB_WGMMA_SS_T (cuda/hopper/wgmma.cuh) with their shape and majors, for
// the element type T (bf16 or f16).
#define FB_BWD_WGMMA(T, NSHAPE, DLIST, OUTS, IA, IB, IS, TA, TB)    \
  if constexpr (is_bf16<T>)                                         \
    FB_WGMMA_SS_T(NSHAPE, DLIST, IA, IB, IS, "bf16", TA, TB, OUTS); \
  else                                                              \
    FB_WGMMA_SS_T(NSHAPE, DLIST, IA, IB, IS, "f16", TA, TB, OUTS)

// D (64 x 64, fp32) [+]= A (64 x 16) * B (16 x 64), A M-major and B N-major in shared memory
// (trans-a = trans-b = 1, allowed for 16-bit types): dQ = dS K with dS stored as dS^T.
template <class T>
__device__ __forceinline__ void wgmma_ss_mn_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  FB_BWD_WGMMA(T, "64", FB_WGMMA_D32, FB_WGMMA_OUT32(d), "32", "33", "34", "1", "1");
}

// D (64 x 32, fp32) [+]= A (64 x 16) * B (16 x 32), both K-major in shared memory: the d256
// configuration's S^T = K Q_w^T and dP^T = V dO_w^T over one consumer's 32 queries.
template <class T>
__device__ __forceinline__ void wgmma_ss_n32(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  FB_BWD_WGMMA(T, "32", FB_WGMMA_D16, FB_WGMMA_OUT16(d), "16", "17", "18", "0", "0");
}

// D (64 x 128, fp32) [+]= A (64 x 16, K-major) * B (16 x 128, N-major), both in shared memory
// (trans-a = 0, trans-b = 1): the d256 configuration's dV += P^T dO and dK += dS^T Q, with P^T and
// dS^T read from the tiles both consumers wrote.
template <class T>
__device__ __forceinline__ void wgmma_ss_tb_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  FB_BWD_WGMMA(T, "128", FB_WGMMA_D64, FB_WGMMA_OUT64(d), "64", "65", "66", "0", "1");
}

// D (64 x 192, fp32) [+]= A (64 x 16, K-major) * B (16 x 192, N-major: three 64-column panels LBO
// apart), both in shared memory (trans-a = 0, trans-b = 1): the d192 configuration's one gradient per
// consumer, dV += P^T dO (consumer 0) or dK += dS^T Q (consumer 1), from the P^T / dS^T tiles.
template <class T>
__device__ __forceinline__ void wgmma_ss_tb_n192(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  FB_BWD_WGMMA(T, "192", FB_WGMMA_D96, FB_WGMMA_OUT96(d), "96", "97", "98", "0", "1");
}
#undef FB_BWD_WGMMA

}  // namespace flashbox::sm90::bwd
