// Column copies between the rows of two [n0, n1, n2, columns] tensors on the device: the zero-padding
// and copy-out steps of a call that src/api runs as several kernel calls on column slices
// (src/api/head_dim_v_split.cpp: V and O with a head dim of their own). Design: column_copy.cu.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "flashbox/flashbox.h"

namespace flashbox::cuda {

// One side of a copy: the element at (i0, i1, i2, j) is ptr[i0 * stride[0] + i1 * stride[1] +
// i2 * stride[2] + j] (elements of dtype: fp16, bf16 or fp32). ptr already points at the first column
// the copy touches.
struct ColumnView {
  void *ptr;
  flashbox_dtype dtype;
  int64_t stride[3];
};

// A dense [n0, n1, n2, width] tensor at ptr.
ColumnView dense_columns(void *ptr, flashbox_dtype dtype, const int64_t rows[3], int64_t width);

enum class ColumnOp {
  copy,  // dst[r, j] = j < src_cols ? src[r, j] : 0 for j < dst_cols (dtype converted, rounded to nearest)
  add,   // dst[r, j] += src[r, j] for j < dst_cols (dst fp32; src_cols must equal dst_cols)
};

// The copy over every row (i0, i1, i2) < rows on `stream`; FLASHBOX_OK or fail(FLASHBOX_ERR_CUDA)
// when the launch fails. Nothing is checked about the views: the caller passes valid ones.
int copy_columns(const ColumnView &dst, const ColumnView &src, const int64_t rows[3], int64_t dst_cols,
                 int64_t src_cols, ColumnOp op, cudaStream_t stream);

}  // namespace flashbox::cuda
