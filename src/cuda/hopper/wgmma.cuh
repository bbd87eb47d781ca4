// Warpgroup matrix multiply-accumulate (wgmma.mma_async, sm_90a) on shared-memory tiles.
//
// The descriptor and fragment facts are in docs/hopper.md §2: a 64-bit descriptor names a
// 128B-swizzled tile in shared memory (start, LBO, SBO, swizzle code 1); the fp32 accumulator of an
// m64nNk16 product holds N/2 floats per thread; an A fragment from registers is 4 x b32 (two 16-bit
// values each). Every accumulator is an asm in/out operand, so the N/2 operand lists are spelled
// out below; the functions are templates on N and the element type (bf16 or fp16).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

namespace flashbox::sm90 {

// Descriptor of a K-major or MN-major bf16/fp16 tile stored as 128-byte swizzled rows
// (PTX "matrix descriptor"): start address and offsets in 16-byte units, layout type 1 = 128B swizzle
// (the default), 2 = 64B swizzle (32-column panels of 64-byte rows: the V tile of head_dim 96).
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                   uint32_t layout = 1) {
  uint64_t d = 0;
  d |= uint64_t((smem_addr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo_bytes & 0x3FFFF) >> 4) << 16;
  d |= uint64_t((sbo_bytes & 0x3FFFF) >> 4) << 32;
  d |= uint64_t(layout) << 62;
  return d;
}

// Advances a descriptor's start address by `bytes` (stays inside the 14-bit field for smem < 256 KB).
// Only the low word moves: a 32-bit add, where a 64-bit one costs the SASS an add with carry and a
// register move per wgmma, and the high word (SBO, swizzle) stays a constant the compiler can fold.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = uint32_t(desc) + (bytes >> 4), hi = uint32_t(desc >> 32);
  return (uint64_t(hi) << 32) | lo;
}

// Shared-memory address of element (row, col) of a 128B-swizzled tile (the layout TMA writes and
// the descriptors above name): 64-column panels of `panel_rows` rows x 128 bytes, panel-aligned to
// 1024 bytes, whose 16-byte chunk c of row r sits at chunk c ^ (r % 8); the address is that of col's
// 8-element chunk.
__device__ __forceinline__ uint32_t swizzled_128b(uint32_t tile, int panel_rows, int row, int col) {
  return tile + (col / 64) * panel_rows * 128 + row * 128 + ((((col % 64) / 8) ^ (row % 8)) << 4);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads/writes of wgmma registers across the async region.
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operands(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

template <class T>
constexpr bool is_bf16 = std::is_same_v<T, __nv_bfloat16>;

// Two fp32 values as one b32 of 16-bit elements, the lower-k value in the low half (A-fragment order).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (is_bf16<T>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
  }
}

#define FB_WGMMA_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FB_WGMMA_OUT16(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FB_WGMMA_D32 \
  "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
  "}"
#define FB_WGMMA_D48 \
  "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" \
  "}"
#define FB_WGMMA_OUT48(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define FB_WGMMA_D56 \
  "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55" \
  "}"
#define FB_WGMMA_OUT56(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
      "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), \
      "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), \
      "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), \
      "+f"(d[54]), "+f"(d[55])
#define FB_WGMMA_D64 \
  "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
  "}"
#define FB_WGMMA_D88 \
  "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87" \
  "}"
#define FB_WGMMA_OUT88(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), \
      "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), \
      "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), \
      "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define FB_WGMMA_D96 \
  "{" \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95" \
  "}"
#define FB_WGMMA_OUT32(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FB_WGMMA_OUT64(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FB_WGMMA_OUT96(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), \
      "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), \
      "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), \
      "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), \
      "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])

// SS form: D (64 x N, fp32) = A (64 x 16, smem) * B (16 x N, smem) [+ D if scale_d]; TA / TB "1"
// reads A M-major / B N-major (16-bit types only), "0" K-major; the outputs last (a macro that
// forwards them hands on their commas). FB_WGMMA_SS: both K-major.
#define FB_WGMMA_SS_T(NSHAPE, DLIST, IA, IB, IS, TY, TA, TB, ...) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS \
               ", 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n" NSHAPE "k16.f32." TY "." TY " " DLIST ", %" IA ", %" IB \
               ", p, 1, 1, " TA ", " TB ";\n}\n" \
               : __VA_ARGS__ \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define FB_WGMMA_SS(NSHAPE, DLIST, OUTS, IA, IB, IS, TY) FB_WGMMA_SS_T(NSHAPE, DLIST, IA, IB, IS, TY, "0", "0", OUTS)

// RS form: D (64 x N, fp32) = A (64 x 16, registers) * B (16 x N, smem; N-major when TB is "1", the
// P.V product's V, K-major when "0", the Q.K^T product's K) [+ D].
#define FB_WGMMA_RS(NSHAPE, DLIST, OUTS, I0, I1, I2, I3, IB, IS, TY, TB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS \
               ", 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n" NSHAPE "k16.f32." TY "." TY " " DLIST ", {%" I0 ", %" I1 ", %" I2 \
               ", %" I3 "}, %" IB ", p, 1, 1, " TB ";\n}\n" \
               : OUTS \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

template <int N, class T>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(N == 64 || N == 112 || N == 128 || N == 176 || N == 192,
                "wgmma_ss: N must be 64, 112, 128, 176 or 192");
  if constexpr (N == 64) {
    if constexpr (is_bf16<T>)
      FB_WGMMA_SS("64", FB_WGMMA_D32, FB_WGMMA_OUT32(d), "32", "33", "34", "bf16");
    else
      FB_WGMMA_SS("64", FB_WGMMA_D32, FB_WGMMA_OUT32(d), "32", "33", "34", "f16");
  } else if constexpr (N == 112) {
    if constexpr (is_bf16<T>)
      FB_WGMMA_SS("112", FB_WGMMA_D56, FB_WGMMA_OUT56(d), "56", "57", "58", "bf16");
    else
      FB_WGMMA_SS("112", FB_WGMMA_D56, FB_WGMMA_OUT56(d), "56", "57", "58", "f16");
  } else if constexpr (N == 128) {
    if constexpr (is_bf16<T>)
      FB_WGMMA_SS("128", FB_WGMMA_D64, FB_WGMMA_OUT64(d), "64", "65", "66", "bf16");
    else
      FB_WGMMA_SS("128", FB_WGMMA_D64, FB_WGMMA_OUT64(d), "64", "65", "66", "f16");
  } else if constexpr (N == 176) {
    if constexpr (is_bf16<T>)
      FB_WGMMA_SS("176", FB_WGMMA_D88, FB_WGMMA_OUT88(d), "88", "89", "90", "bf16");
    else
      FB_WGMMA_SS("176", FB_WGMMA_D88, FB_WGMMA_OUT88(d), "88", "89", "90", "f16");
  } else {
    if constexpr (is_bf16<T>)
      FB_WGMMA_SS("192", FB_WGMMA_D96, FB_WGMMA_OUT96(d), "96", "97", "98", "bf16");
    else
      FB_WGMMA_SS("192", FB_WGMMA_D96, FB_WGMMA_OUT96(d), "96", "97", "98", "f16");
  }
}

template <int N, class T, bool TRANS_B = true>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  static_assert(N == 32 || N == 64 || N == 96 || N == 128 || N == 192, "wgmma_rs: N must be 32, 64, 96, 128 or 192");
  // N = 32: dV and dK of the head_dim-32 backward (the kernel table's d32 row).
#define FB_RS_ARGS(TB) \
  if constexpr (N == 32) { \
    if constexpr (is_bf16<T>) \
      FB_WGMMA_RS("32", FB_WGMMA_D16, FB_WGMMA_OUT16(d), "16", "17", "18", "19", "20", "21", "bf16", TB); \
    else \
      FB_WGMMA_RS("32", FB_WGMMA_D16, FB_WGMMA_OUT16(d), "16", "17", "18", "19", "20", "21", "f16", TB); \
  } else if constexpr (N == 64) { \
    if constexpr (is_bf16<T>) \
      FB_WGMMA_RS("64", FB_WGMMA_D32, FB_WGMMA_OUT32(d), "32", "33", "34", "35", "36", "37", "bf16", TB); \
    else \
      FB_WGMMA_RS("64", FB_WGMMA_D32, FB_WGMMA_OUT32(d), "32", "33", "34", "35", "36", "37", "f16", TB); \
  } else if constexpr (N == 96) { \
    if constexpr (is_bf16<T>) \
      FB_WGMMA_RS("96", FB_WGMMA_D48, FB_WGMMA_OUT48(d), "48", "49", "50", "51", "52", "53", "bf16", TB); \
    else \
      FB_WGMMA_RS("96", FB_WGMMA_D48, FB_WGMMA_OUT48(d), "48", "49", "50", "51", "52", "53", "f16", TB); \
  } else if constexpr (N == 128) { \
    if constexpr (is_bf16<T>) \
      FB_WGMMA_RS("128", FB_WGMMA_D64, FB_WGMMA_OUT64(d), "64", "65", "66", "67", "68", "69", "bf16", TB); \
    else \
      FB_WGMMA_RS("128", FB_WGMMA_D64, FB_WGMMA_OUT64(d), "64", "65", "66", "67", "68", "69", "f16", TB); \
  } else { \
    if constexpr (is_bf16<T>) \
      FB_WGMMA_RS("192", FB_WGMMA_D96, FB_WGMMA_OUT96(d), "96", "97", "98", "99", "100", "101", "bf16", TB); \
    else \
      FB_WGMMA_RS("192", FB_WGMMA_D96, FB_WGMMA_OUT96(d), "96", "97", "98", "99", "100", "101", "f16", TB); \
  }
  if constexpr (TRANS_B) {
    FB_RS_ARGS("1")
  } else {
    FB_RS_ARGS("0")
  }
#undef FB_RS_ARGS
}

#undef FB_WGMMA_SS
#undef FB_WGMMA_RS

}  // namespace flashbox::sm90
