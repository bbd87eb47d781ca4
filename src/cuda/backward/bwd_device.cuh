// Small device helpers of the backward kernels: element traits (bf16 / fp16), 16-byte cp.async with
// zero fill, ldmatrix (plain and transposed) and the m16n8k16 tensor-core product. The backward keeps
// its own copies so that it builds on its own; src/cuda/common holds the forward's equivalents.
//
// mma.m16n8k16 fragments, g = lane / 4, t = lane % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//   A 16x16: a0 (row g, cols 2t..2t+1)  a1 (row g+8, cols 2t..)  a2 (row g, cols 2t+8..)  a3 (row g+8, cols 2t+8..)
//   B 16x8:  b0 (rows 2t..2t+1, col g)  b1 (rows 2t+8..2t+9, col g)
//   C 16x8:  c0,c1 (row g, cols 2t, 2t+1)  c2,c3 (row g+8, cols 2t, 2t+1)
// Two neighbouring C tiles packed to 16-bit pairs form one A fragment (P and dS never touch memory on
// their way into the next product).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashbox::cuda::bwd {

template <typename Elem>
struct ElemTraits;

template <>
struct ElemTraits<__nv_bfloat16> {
  static constexpr bool kBf16 = true;
  __device__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  __device__ static float2 unpack(uint32_t u) {
    __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162 *>(&u);
    return __bfloat1622float2(v);
  }
};

template <>
struct ElemTraits<__half> {
  static constexpr bool kBf16 = false;
  __device__ static uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  __device__ static float2 unpack(uint32_t u) {
    __half2 v = *reinterpret_cast<__half2 *>(&u);
    return __half22float2(v);
  }
};

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes global -> shared without staging in registers; src_bytes = 0 writes 16 zero bytes
// (rows past the end of a sequence) and reads nothing.
__device__ __forceinline__ void cp_async_16(void *smem, const void *gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Four 8x8 16-bit matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}

// d += a * b on tensor cores, fp32 accumulate.
template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ldmatrix lane addresses for a 16x16 operand at (row0, col0) of a row-major shared tile with row
// stride `ld` elements. Matrix index m = lane / 8, row-in-matrix lane % 8.
//   A, stored [m][k]:                matrices (r0,c0) (r0+8,c0) (r0,c0+8) (r0+8,c0+8)  -> a0..a3
//   A, stored transposed [k][m]:     .trans of (k0,m0) (k0,m0+8) (k0+8,m0) (k0+8,m0+8) -> a0..a3
//   two B tiles, stored [n][k]:      (n0,k0) (n0,k0+8) (n0+8,k0) (n0+8,k0+8) -> b0,b1 of n0 and n0+8
//   two B tiles, stored [k][n]:      .trans of (k0,n0) (k0+8,n0) (k0,n0+8) (k0+8,n0+8) -> same
template <typename Elem>
__device__ __forceinline__ const Elem *frag_a_addr(const Elem *tile, int ld, int row0, int col0, int lane) {
  const int m = lane >> 3;
  return tile + (row0 + (lane & 7) + (m & 1) * 8) * ld + col0 + (m >> 1) * 8;
}
template <typename Elem>
__device__ __forceinline__ const Elem *frag_a_trans_addr(const Elem *tile, int ld, int m0, int k0, int lane) {
  const int m = lane >> 3;
  return tile + (k0 + (lane & 7) + (m >> 1) * 8) * ld + m0 + (m & 1) * 8;
}
template <typename Elem>
__device__ __forceinline__ const Elem *frag_b_nk_addr(const Elem *tile, int ld, int n0, int k0, int lane) {
  const int m = lane >> 3;
  return tile + (n0 + (lane & 7) + (m >> 1) * 8) * ld + k0 + (m & 1) * 8;
}
template <typename Elem>
__device__ __forceinline__ const Elem *frag_b_kn_addr(const Elem *tile, int ld, int k0, int n0, int lane) {
  const int m = lane >> 3;
  return tile + (k0 + (lane & 7) + (m & 1) * 8) * ld + n0 + (m >> 1) * 8;
}

// Copies rows [row0, row0 + kRows) of one head into a shared tile (row stride D + 8: the 16-byte pad
// keeps ldmatrix free of bank conflicts); rows at or past `limit` become zeros.
template <typename Elem, int D, int kRows, int kThreads>
__device__ __forceinline__ void load_rows_async(Elem *tile, const Elem *head, int64_t row_stride, int row0, int limit,
                                                int tid) {
  constexpr int kChunks = D / 8;
  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, cc = c % kChunks;
    const bool valid = row0 + r < limit;
    const Elem *src = valid ? head + int64_t(row0 + r) * row_stride + cc * 8 : head;
    cp_async_16(tile + r * (D + 8) + cc * 8, src, valid ? 16 : 0);
  }
}

}  // namespace flashbox::cuda::bwd
