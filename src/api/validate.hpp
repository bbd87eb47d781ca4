// Argument validation at the API edge. Backends assume everything checked here holds. Each check
// returns FLASHBOX_OK or detail::fail(code, message) with a message naming the argument and its
// value. The tensor-level checks are shared with the backward entry point (src/api/backward_api.cpp),
// which describes dout/dq/dk/dv with TensorDesc and runs the same checks on them.
//
// Rules (see docs in flashbox.h for the layout):
//   sizes          batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim >= 1; heads_q % heads_kv == 0
//                  (v and o have rows of head_dim_v, the extension's, which is head_dim unless set)
//   counts         every element count, byte count and strided extent fits in int64
//   strides        > 0; with head_dim contiguous, sorting the (stride, extent) pairs of the dims with
//                  extent > 1 must give stride[0] >= head_dim and stride[i] >= stride[i-1] * extent[i-1]
//                  (distinct indices never share an element; sufficient, not necessary)
//   memory         o (and lse) must not share an element with q, k, v or each other, decided per
//                  element set (src/api/overlap.hpp), not by address range: interleaved views of one
//                  buffer (o = qo[:, :, 1], dk/dv = dkv[:, :, 0/1]) are fine
//   head_dim       CPU: 1..256 (any impl); CUDA flash: 64 or 128; CUDA naive: 8..256, multiple of 8
//   dtype          CPU: fp32, fp16, bf16; CUDA: fp16, bf16; fp8 e4m3 refused with a message naming
//                  the one call that takes it (the extension's forward, src/api/fp8_args.hpp)
//   impl           CPU: auto (= blocked), naive, blocked; CUDA: auto (= flash), naive, flash
//   alignment      CPU: element-aligned pointers; CUDA: 16-byte aligned q/k/v/o and strides a
//                  multiple of 8 elements (16 bytes); lse 4-byte aligned
//   other          causal 0 or 1; softmax_scale finite and >= 0 (0 means 1/sqrt(head_dim))
//   device         CUDA needs a CUDA build and a visible GPU (checked last, so every other rule can be
//                  tested on a machine without a GPU)
#pragma once
#include <cstdint>

#include "api/overlap.hpp"
#include "core/problem.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

// One [batch, seq, heads, head_dim] tensor as the API sees it.
struct TensorDesc {
  const char *name;         // "q", "dout", ...: used in messages
  const char *stride_name;  // "q_stride", "dout_stride", ...
  const void *ptr;
  const int64_t *stride;  // batch, seq, head (elements)
  int64_t batch, seq, heads, head_dim;
  const char *head_dim_name = "head_dim";  // "head_dim_v" for v and o when the extension sets it
};

TensorDesc tensor_q(const flashbox_attention_args &a);
TensorDesc tensor_k(const flashbox_attention_args &a);
// v and o have rows of head_dim_v elements (the extension's head_dim_v; 0: head_dim).
TensorDesc tensor_v(const flashbox_attention_args &a, int64_t head_dim_v = 0);
TensorDesc tensor_o(const flashbox_attention_args &a, int64_t head_dim_v = 0);

// Enum values, sizes, heads, causal, softmax_scale (no pointers); v/o counts with head_dim_v.
int validate_scalars(const flashbox_attention_args &a, int64_t head_dim_v = 0);
// impl / dtype / head_dim supported by a.device (enums already known valid).
int validate_support(const flashbox_attention_args &a, bool backward = false);
// One tensor: pointer not null, strides > 0, no self-overlap, extents fit int64, alignment for device.
int validate_tensor(const TensorDesc &t, flashbox_dtype dtype, flashbox_device device);
// Two tensors share no element (exact per element set; see src/api/overlap.hpp).
int validate_disjoint(const TensorDesc &written, const TensorDesc &other, flashbox_dtype dtype);
// The same for tensors of two dtypes (an fp8 call's o against q, k, v).
int validate_disjoint(const TensorDesc &written, flashbox_dtype written_dtype, const TensorDesc &other,
                      flashbox_dtype other_dtype);
// An fp32 [batch, heads_q, seqlen_q] buffer (lse, or the backward's row sums): alignment and that it
// does not overlap `other`. Null is allowed; callers that require it check for null themselves.
int validate_lse(const float *lse, const char *name, const flashbox_attention_args &a);
int validate_lse_disjoint(const float *lse, const char *name, const flashbox_attention_args &a,
                          const TensorDesc &other);
int validate_lse_disjoint(const float *lse, const char *name, const flashbox_attention_args &a, const TensorDesc &other,
                          flashbox_dtype other_dtype);
// CUDA requested: built with CUDA and a GPU visible; CUDA pointers are device-accessible memory.
int validate_device_available(flashbox_device device);
int validate_device_pointer(const void *ptr, const char *name, flashbox_device device);

// Everything above, for a forward call. `args` may be null. head_dim_v (already checked by the
// extension's rules; 0: head_dim) sizes v and o.
int validate_forward_args(const flashbox_attention_args *args, int64_t head_dim_v = 0);
// The same with o in out_dtype and q, k, v in args.dtype: the extension's fp8 forward (dtype
// FLASHBOX_FLOAT8_E4M3, out_dtype bf16 or fp16, both checked by src/api/fp8_args.hpp first); the
// scalar and support rules run with dtype = out_dtype.
int validate_forward_args(const flashbox_attention_args &args, int64_t head_dim_v, flashbox_dtype out_dtype);
// The same for a backward call (src/api/backward_api.cpp). `args` may be null. head_dim_v (as for
// the forward) sizes v, o, dout and dv.
int validate_backward_args(const flashbox_attention_grad_args *args, int64_t head_dim_v = 0);

// The byte sets validate_disjoint compares: a tensor (after validate_tensor) and an fp32
// [batch, heads_q, seqlen_q] buffer such as lse.
ByteView tensor_view(const TensorDesc &t, flashbox_dtype dtype);
ByteView lse_view(const float *lse, const flashbox_attention_args &a);

// Byte span [first, last] of a tensor relative to its pointer (valid after validate_tensor).
int64_t tensor_span_bytes(const TensorDesc &t, flashbox_dtype dtype);

const char *device_name(int device);

}  // namespace flashbox::detail
