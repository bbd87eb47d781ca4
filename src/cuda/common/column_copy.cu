// Column copies (column_copy.hpp): one elementwise kernel for every step that moves columns between
// a caller's strided tensor and a dense scratch tensor when one attention call is run as several
// kernel calls on column slices: Q and K zero-padded to a wider kernel head dim, V / O / dO slices
// zero-padded to the kernel's head dim, the kept columns of O / dV / dQ / dK copied out, per-slice
// dQ / dK summed in fp32 and cast once at the end.
// Design: a block of 32 x 8 threads covers 8 rows, the 32 threads of a warp walk one row's columns
// (consecutive threads, consecutive addresses: coalesced on both sides whatever the row strides); the
// grid strides over the rows, so any row count fits a capped grid. A copy between two tensors of one
// dtype moves the bits (bitwise, subnormals and NaN payloads included, whatever fast-math flushes);
// otherwise elements go through fp32 (fp32 -> 16 bits rounds to nearest). The dtype
// is a runtime switch rather than a template: these copies are memory-bound, and one kernel keeps the
// file small. They are a small fraction of the attention they serve (O(rows x columns) against
// O(rows x keys x columns)); a dedicated kernel for a head_dim_v makes them unnecessary.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/column_copy.hpp"
#include "cuda/common/cuda_check.hpp"

namespace flashbox::cuda {
namespace {

constexpr int kColumnThreads = 32, kRowsPerBlock = 8;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

__device__ __forceinline__ float load_element(const void *p, flashbox_dtype t, int64_t i) {
  switch (t) {
    case FLASHBOX_FLOAT16: return __half2float(static_cast<const __half *>(p)[i]);
    case FLASHBOX_BFLOAT16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    default: return static_cast<const float *>(p)[i];
  }
}

__device__ __forceinline__ void store_element(void *p, flashbox_dtype t, int64_t i, float x) {
  switch (t) {
    case FLASHBOX_FLOAT16: static_cast<__half *>(p)[i] = __float2half_rn(x); break;
    case FLASHBOX_BFLOAT16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(x); break;
    default: static_cast<float *>(p)[i] = x; break;
  }
}

struct CopyArgs {
  ColumnView dst, src;
  int64_t n1, n2, rows;  // rows = n0 * n1 * n2
  int64_t dst_cols, src_cols;
  bool add;
  bool same_bits;  // a copy between two 16-bit tensors of one dtype: the bits move unchanged
};

__device__ __forceinline__ int64_t row_offset(const int64_t stride[3], int64_t i0, int64_t i1, int64_t i2) {
  return i0 * stride[0] + i1 * stride[1] + i2 * stride[2];
}

__global__ void __launch_bounds__(kColumnThreads *kRowsPerBlock) copy_columns_kernel(const CopyArgs a) {
  const int64_t step = int64_t(gridDim.x) * kRowsPerBlock;
  for (int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y; r < a.rows; r += step) {
    const int64_t i2 = r % a.n2, i1 = (r / a.n2) % a.n1, i0 = r / (a.n2 * a.n1);
    const int64_t d0 = row_offset(a.dst.stride, i0, i1, i2), s0 = row_offset(a.src.stride, i0, i1, i2);
    if (a.same_bits) {
      uint16_t *dst = static_cast<uint16_t *>(a.dst.ptr) + d0;
      const uint16_t *src = static_cast<const uint16_t *>(a.src.ptr) + s0;
      for (int64_t j = threadIdx.x; j < a.dst_cols; j += kColumnThreads) dst[j] = j < a.src_cols ? src[j] : 0;
      continue;
    }
    for (int64_t j = threadIdx.x; j < a.dst_cols; j += kColumnThreads) {
      float x = j < a.src_cols ? load_element(a.src.ptr, a.src.dtype, s0 + j) : 0.0f;
      if (a.add) x += load_element(a.dst.ptr, a.dst.dtype, d0 + j);
      store_element(a.dst.ptr, a.dst.dtype, d0 + j, x);
    }
  }
}

}  // namespace

ColumnView dense_columns(void *ptr, flashbox_dtype dtype, const int64_t rows[3], int64_t width) {
  return {ptr, dtype, {rows[1] * rows[2] * width, rows[2] * width, width}};
}

int copy_columns(const ColumnView &dst, const ColumnView &src, const int64_t rows[3], int64_t dst_cols,
                 int64_t src_cols, ColumnOp op, cudaStream_t stream) {
  const bool add = op == ColumnOp::add;
  const bool same_bits = !add && dst.dtype == src.dtype && dst.dtype != FLASHBOX_FLOAT32;
  CopyArgs a{dst, src, rows[1], rows[2], rows[0] * rows[1] * rows[2], dst_cols, src_cols, add, same_bits};
  if (a.rows == 0 || dst_cols == 0) return FLASHBOX_OK;
  const int64_t blocks = std::min(kMaxBlocks, (a.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  copy_columns_kernel<<<unsigned(blocks), dim3(kColumnThreads, kRowsPerBlock), 0, stream>>>(a);
  FLASHBOX_CUDA_CHECK_LAUNCH("copy_columns_kernel");
  return FLASHBOX_OK;
}

}  // namespace flashbox::cuda
