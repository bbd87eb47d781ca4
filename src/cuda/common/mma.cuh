// Warp-level tensor-core product D = A * B + D, mma.sync.aligned.m16n8k16 (sm_80+), fp32 accumulate.
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4, t = lane % 4:
//   A 16x16 (4 regs, 2 elements each): a0 (row g,   cols 2t..2t+1)   a1 (row g+8, cols 2t..2t+1)
//                                      a2 (row g,   cols 2t+8..+9)   a3 (row g+8, cols 2t+8..+9)
//   B 16x8  (2 regs):                  b0 (rows 2t..2t+1, col g)     b1 (rows 2t+8..+9, col g)
//   C 16x8  (4 floats):                c0,c1 (row g, cols 2t, 2t+1)  c2,c3 (row g+8, cols 2t, 2t+1)
// Two neighbouring C tiles (cols 0..7 and 8..15), packed to 16-bit pairs, are exactly one A fragment:
// that is how P goes from the S accumulator to the P*V product without touching shared memory.
#pragma once
#include <cstdint>

namespace flashbox::cuda {

template <bool kBf16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
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

// A 16x16 output tile: two m16n8k16 products with one A fragment and the four B registers of one
// ldmatrix_x4 (b[0], b[1]: columns 0-7; b[2], b[3]: columns 8-15) into d0 and d1.
template <bool kBf16>
__device__ __forceinline__ void mma_m16n16k16(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                              const uint32_t (&b)[4]) {
  mma_m16n8k16<kBf16>(d0, a, b[0], b[1]);
  mma_m16n8k16<kBf16>(d1, a, b[2], b[3]);
}

}  // namespace flashbox::cuda
