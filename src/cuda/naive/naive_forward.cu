// Naive CUDA attention, the T^2 baseline (FlashAttention paper §2.2, "standard attention"):
//   S = scale * Q K^T   (cuBLAS, fp32 out)   -> device memory, [batch, heads_q, seqlen_q, seqlen_k]
//   P = softmax(S)      (naive_masked_softmax_kernel, input dtype) -> device memory, same shape
//   O = P V             (cuBLAS, fp32 accumulate, written in the input dtype with the args' strides)
// S and P are really allocated (stream-ordered) and counted as scratch; when they do not fit the call
// returns FLASHBOX_ERR_OUT_OF_MEMORY having freed what it took.
// Arguments were validated in src/api: fp16/bf16 data, head_dim a multiple of 8, 16-byte aligned
// pointers, strides multiples of 8 elements, heads_q a multiple of heads_kv; lse may be NULL.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/backends.hpp"
#include "core/call_state.hpp"
#include "core/error.hpp"
#include "cuda/common/cublas_handle.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/naive/naive_softmax.cuh"

namespace flashbox::detail {
namespace {

using cuda::DeviceScratch;

// Leading dimension for cuBLAS: with a single row the stride is never used, but cuBLAS still asks
// for ld >= the row length.
int64_t leading_dim(int64_t stride, int64_t rows, int64_t row_len) {
  return rows == 1 ? std::max(stride, row_len) : stride;
}

bool checked_mul(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace

int cuda_naive_forward(const Problem &a) {
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16;
  const cudaDataType_t elem = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const int64_t elem_bytes = 2;
  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  const int64_t B = a.batch, Tq = a.seqlen_q, Tk = a.seqlen_k, Hq = a.heads_q, Hkv = a.heads_kv, D = a.head_dim;
  const int64_t group = Hq / Hkv;
  const float scale = a.scale;

  // Sizes of S (fp32) and P (input dtype); an overflow is as much "does not fit" as a failed malloc.
  int64_t score_count = 0, s_bytes = 0, p_bytes = 0, rows = 0;
  if (!checked_mul(B * Hq, Tq, &rows) || !checked_mul(rows, Tk, &score_count) ||
      !checked_mul(score_count, 4, &s_bytes) || !checked_mul(score_count, elem_bytes, &p_bytes)) {
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY,
                "cuda naive attention: the score matrices S and P (batch*heads_q*seqlen_q*"
                "seqlen_k elements) overflow a 64-bit byte count");
  }

  DeviceScratch s_buf(stream), p_buf(stream);
  auto oom = [&](const char *what, int64_t bytes) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY,
                std::string("cuda naive attention: cannot allocate ") + what + " (" + std::to_string(bytes) +
                    " bytes = batch*heads_q*seqlen_q*seqlen_k = " + std::to_string(score_count) +
                    " scores) on the device (" + std::to_string(int64_t(free_b)) + " of " +
                    std::to_string(int64_t(total_b)) + " bytes free); use impl FLASH, whose extra memory is 0");
  };
  cudaError_t e = s_buf.allocate(s_bytes);
  if (e == cudaErrorMemoryAllocation) return oom("S (fp32)", s_bytes);
  FLASHBOX_CUDA_TRY(e);
  e = p_buf.allocate(p_bytes);
  if (e == cudaErrorMemoryAllocation) return oom("P", p_bytes);
  FLASHBOX_CUDA_TRY(e);

  cublasStatus_t st;
  cublasHandle_t h = cuda::cublas_handle_for_current_device(&st);
  FLASHBOX_CUBLAS_TRY(st);
  FLASHBOX_CUBLAS_TRY(cublasSetStream(h, stream));
  FLASHBOX_CUBLAS_TRY(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));

  const char *q = static_cast<const char *>(a.q);
  const char *k = static_cast<const char *>(a.k);
  const char *v = static_cast<const char *>(a.v);
  char *o = static_cast<char *>(a.o);
  float *s = s_buf.as<float>();
  char *p = p_buf.as<char>();
  const int64_t head_scores = Tq * Tk;

  // cuBLAS is column-major: a row-major [T, D] head with row stride ld is a column-major D x T matrix.
  //   S^T (Tk x Tq) = K_h^T-view * Q_h  ->  gemm(T, N, m=Tk, n=Tq, k=D)
  //   O^T (D x Tq)  = V_h * P^T-view    ->  gemm(N, N, m=D, n=Tq, k=Tk)
  // One strided-batched call covers the kv heads of one (batch, member j of each GQA group): query
  // head hk*group + j reads kv head hk, so every operand advances by a fixed stride per kv head.
  const float one = 1.f, zero = 0.f;
  const int ldq = int(leading_dim(a.q_stride[1], Tq, D)), ldk = int(leading_dim(a.k_stride[1], Tk, D));
  const int ldv = int(leading_dim(a.v_stride[1], Tk, D)), ldo = int(leading_dim(a.o_stride[1], Tq, D));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < group; ++j) {
      const int64_t h0 = j;  // query head of kv head 0 in this batch of the call
      const char *qh = q + (b * a.q_stride[0] + h0 * a.q_stride[2]) * elem_bytes;
      const char *kh = k + (b * a.k_stride[0]) * elem_bytes;
      float *sh = s + (b * Hq + h0) * head_scores;
      FLASHBOX_CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(Tk), int(Tq), int(D), &scale, kh,
                                                     elem, ldk, a.k_stride[2], qh, elem, ldq, group * a.q_stride[2],
                                                     &zero, sh, CUDA_R_32F, int(Tk), group * head_scores, int(Hkv),
                                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }

  const int warps_per_block = 8;
  const int64_t blocks = (rows + warps_per_block - 1) / warps_per_block;
  if (bf16) {
    cuda::naive_masked_softmax_kernel<__nv_bfloat16>
        <<<unsigned(blocks), warps_per_block * 32, 0, stream>>>(s, reinterpret_cast<__nv_bfloat16 *>(p), a.lse, rows,
                                                                Tq, Tk, a.causal);
  } else {
    cuda::naive_masked_softmax_kernel<__half>
        <<<unsigned(blocks), warps_per_block * 32, 0, stream>>>(s, reinterpret_cast<__half *>(p), a.lse, rows, Tq, Tk,
                                                                a.causal);
  }
  FLASHBOX_CUDA_CHECK_LAUNCH("naive_masked_softmax_kernel");

  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < group; ++j) {
      const char *vh = v + (b * a.v_stride[0]) * elem_bytes;
      char *oh = o + (b * a.o_stride[0] + j * a.o_stride[2]) * elem_bytes;
      const char *ph = p + (b * Hq + j) * head_scores * elem_bytes;
      FLASHBOX_CUBLAS_TRY(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(D), int(Tq), int(Tk), &one, vh,
                                                     elem, ldv, a.v_stride[2], ph, elem, int(Tk), group * head_scores,
                                                     &zero, oh, elem, ldo, group * a.o_stride[2], int(Hkv),
                                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
  set_kernel_name(std::string("cuda_naive_cublas_") + (bf16 ? "bf16" : "fp16"));
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
