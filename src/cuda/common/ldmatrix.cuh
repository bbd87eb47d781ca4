// ldmatrix: a warp loads four 8x8 16-bit matrices from shared memory into registers, each lane
// giving the address of one 8-element row (lanes 0-7 matrix 0, 8-15 matrix 1, 16-23 matrix 2,
// 24-31 matrix 3). Register i receives matrix i in the mma fragment layout (lane holds row lane/4,
// columns 2*(lane%4)..+1); `.trans` delivers the transpose, which turns a row-major [key][d] V tile
// into the B operand of P*V.
#pragma once
#include <cstdint>

namespace flashbox::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

}  // namespace flashbox::cuda
