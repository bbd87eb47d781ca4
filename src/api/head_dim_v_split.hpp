// head_dim_v != head_dim on device = cuda (flashbox_attention_ext.head_dim_v), run as calls of the
// existing kernels on column slices of V and O, each with one head dim for Q, K, V and O. A forward
// whose pair has a kernel of its own (the Hopper forward's (192, 128): sm90::dv_kernel in
// src/cuda/forward/sm90/tile_policy.hpp) runs there instead, without slices or copies, where that
// kernel takes the call (src/api/dispatch.cpp, cuda_forward_native_head_dim_v); the backward of such
// a pair likewise (the sm90 backward's (192, 128) kernel, cuda_backward_native_head_dim_v).
//
// Forward. P = softmax(scale Q K^T) depends on Q and K only, so O's columns are independent:
// O[:, c0:c0+n] = P V[:, c0:c0+n]. V's columns are cut into slices of at most kMaxSliceColumns; a
// slice of n columns runs the kernel at head dim w = max(head_dim, n rounded up to 8), with Q and K
// zero-padded from head_dim to w when w > head_dim (zero columns add nothing to Q K^T; the scale is
// the call's, resolved from the caller's head_dim before any slice) and V zero-padded from n to w
// when n < w. Every slice computes the same LSE; the last one writes it.
//   head_dim_v < head_dim (DeepSeek's 192 / 128): one slice, V zero-padded to head_dim.
//   head_dim_v > head_dim (MLA's 64 / 512; 128 / 256): slices of 256 columns, Q and K padded to 256.
// Backward. dS = P o (dP - D) with dP = dO V^T and D = rowsum(dO o O): both are sums over V's
// columns, so dS, and with it dQ = scale dS K and dK = scale dS^T Q, is the sum of the slices'
// (softcap's factor and a sink's term are linear in dP - D as well). Each slice runs the backward on
// (Q_w, K_w, V_s, O_s, dO_s) with the call's LSE; dV's slice is its own; dQ and dK (each slice's in
// the call's dtype, as its kernel writes them) are summed over the slices in fp32 and rounded once,
// and dsink (linear in D) is summed the same way. Zero columns of
// V_s / O_s / dO_s change neither dP nor D, and their dV columns are dropped.
//
// A slice whose n columns fill its head dim (n = w) reads the caller's V / O / dO in place (a pointer
// to its first column, the caller's strides); other slices read zero-padded dense copies (a kernel
// reads and writes head_dim columns of every row it is given: on a narrower V or O it would read past
// the rows, past the allocation at the tensor's end, and write past O's rows). Outputs go
// to scratch and are copied out once every slice has run, except the last slice's when it is such a
// view: so a slice that fails (a family declines, scratch does not fit) leaves o, lse, dq, dk, dv and
// dsink as they were. Scratch is one stream-ordered allocation (DeviceScratch), sized before the first
// launch; the kernels' own scratch comes on top, per slice. One difference from a single kernel call:
// with malformed device prefix sums (cu_seqlens not covering every row, which cuda does not check),
// rows that no sequence covers get unspecified values from the copy-out instead of keeping theirs.
#pragma once
#ifdef FLASHBOX_HAVE_CUDA
#include <cstdint>

#include "core/problem.hpp"

namespace flashbox::detail {

// Columns of V per kernel call: the largest head dim the CUDA kernels take.
inline constexpr int64_t kMaxSliceColumns = 256;

// p.head_dim_v != p.head_dim (p validated as the extension's forward / backward validates it).
int cuda_forward_head_dim_v(const Problem &p);
int cuda_backward_head_dim_v(const GradProblem &g);

}  // namespace flashbox::detail
#endif
