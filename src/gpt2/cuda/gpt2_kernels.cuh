// The element-wise and row-wise kernels of the GPT-2 forward (gpt2_kernels.cu). All launch on the
// given stream; sizes are checked by the caller (CudaGpt2): C % 8 == 0, ld % 4 == 0.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashbox::gpt2 {

// x[m, :] = wte[tokens[m], :] + wpe[m % T, :]   (bf16 tables, fp32 residual stream)
void launch_embedding(const int32_t *tokens, const __nv_bfloat16 *wte, const __nv_bfloat16 *wpe, float *x, int64_t rows,
                      int T, int C, cudaStream_t stream);
// y = (x - mean) / sqrt(var + 1e-5) * w + b per row of C, fp32 in, bf16 out.
void launch_layernorm(const float *x, const float *w, const float *b, __nv_bfloat16 *y, int64_t rows, int C,
                      cudaStream_t stream);
// x = gelu_tanh(x) in place, n % 8 == 0.
void launch_gelu(__nv_bfloat16 *x, int64_t n, cudaStream_t stream);
// For the rows [row0, row0 + rows) of the token stream: loss[m] = logsumexp(logits[m - row0, :V]) -
// logits[m - row0, tokens[m + 1]], or 0 for the last position of a window (m % T == T - 1).
void launch_cross_entropy(const float *logits, int64_t ld, int V, const int32_t *tokens, int64_t row0, int64_t rows,
                          int T, float *loss, cudaStream_t stream);

}  // namespace flashbox::gpt2
