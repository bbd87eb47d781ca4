// Host side of the tensor memory accelerator, shared by the Hopper forward and backward: describing
// a [batch, seq, heads, head_dim] tensor with any strides as a 4-D tensor map of 128B-swizzled boxes.
// cuTensorMapEncodeTiled comes from the driver through the runtime's entry-point query, so nothing
// links libcuda.
#pragma once
#include <cuda.h>
#include <cstdint>

namespace flashbox::sm90 {

// Where the sequence, head and batch dimensions sit among a tensor map's coordinates 1..3 (the
// host orders them by stride so that any strided layout can be described).
struct TmaOrder {
  int seq, head, batch;
};

// A [batch, seq, heads, head_dim] tensor as the C API passes it.
struct TensorView {
  const void *base;
  int64_t seq, heads, batch;
  int64_t stride[3];  // batch, seq, head (elements)
};

// The view the sm90 forward and backward describe to the TMA: with variable-length batches the
// tensor is one batch entry of `seq` = total rows, and its batch stride is unused.
inline TensorView attention_view(const void *base, int64_t seq, int64_t heads, int64_t batch,
                                 const int64_t stride[3], bool varlen) {
  return {base, seq, heads, varlen ? 1 : batch, {varlen ? 0 : stride[0], stride[1], stride[2]}};
}

// True when the driver offers cuTensorMapEncodeTiled.
bool tma_available();
// Why the sm_90a kernels cannot run on the current device (no device, not compute capability 9.0,
// no tensor-map encoder), or nullptr when they can.
const char *sm90_unavailable_reason();
// The TMA can address the tensor: 16-byte aligned base, every stride of a non-unit dimension a
// multiple of 16 bytes and below 2^40; elem_bytes: 2 (bf16/fp16) or 1 (fp8 e4m3).
bool tma_describable(const TensorView &t, int elem_bytes = 2);
// Encodes {head_dim, outer dims by increasing stride}; a box is 64 columns x box_rows rows of seq,
// 128B swizzle, or with box_cols 32, 32 columns and 64B swizzle (the V tile of the head_dim 96
// forward: three 32-column panels, no padding). False when the driver rejects it. `d` is the call's head_dim, not the kernel's: a
// kernel of a larger head_dim (the sm90 forward's next instantiation up) reads its columns past d
// as the TMA's zero fill and its stores there are clipped.
// elem_bytes 1 (fp8 e4m3, type UINT8): box_cols 128 (one 128-byte swizzle row).
bool encode_map(CUtensorMap *map, TmaOrder *ord, CUtensorMapDataType type, const TensorView &t, int64_t d,
                int box_rows, int box_cols = 64, int elem_bytes = 2);
// A 4-D map of given sizes (elements), byte strides of dims 1..3 and box, 128B swizzle, zero fill:
// for tensors the library lays out itself (the fp8 forward's V^T scratch).
bool encode_map_4d(CUtensorMap *map, CUtensorMapDataType type, const void *base, const uint64_t (&dims)[4],
                   const uint64_t (&stride_bytes)[3], const uint32_t (&box)[4]);

}  // namespace flashbox::sm90
