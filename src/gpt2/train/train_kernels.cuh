// The element-wise and row-wise kernels of GPT-2 training on CUDA (train_kernels.cu): forward ops that
// keep what the backward needs, their backward, the fused softmax cross-entropy with its gradient,
// deterministic column sums, the gradient norm and AdamW. Every reduction has a fixed order (no
// floating-point atomics), so a step is bitwise reproducible. All launch on the legacy default stream.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashbox::gpt2::train {

using bf16 = __nv_bfloat16;

// x[m, :] = wte[tokens[m], :] + wpe[m % T, :] (fp32 master tables, fp32 residual stream); C % 4 == 0.
void embedding_forward(const int32_t *tokens, const float *wte, const float *wpe, float *x, int64_t M, int T, int C);
// dwte[tok] += sum of dx rows at the positions of tok, in position order. order lists positions grouped
// by token (ascending), starts[u]..starts[u+1] the group of unique token uniq[u].
void embedding_backward_wte(const float *dx, const int32_t *order, const int32_t *starts, const int32_t *uniq,
                            int n_unique, float *dwte, int C);
// dwpe[t] += sum over windows b of dx[b * T + t].
void embedding_backward_wpe(const float *dx, float *dwpe, int B, int T, int C);

// y = LN(x) * w + b in bf16, with each row's mean and 1/std kept for the backward.
void layernorm_forward(const float *x, const float *w, const float *b, bf16 *y, float *mean, float *rstd, int64_t M,
                       int C);
// LayerNorm's backward in one pass (layernorm_backward.cu): dx = (accumulate ? dx : 0)
// + LN's input gradient; dw += sum_m dy xhat; db += sum_m dy; with dx_bf16 set, also dx_bf16 =
// bf16(dx) and dbias_next += sum_m dx (the bias gradient of the projection that produced this
// residual), which saves the next layer down a pass over dx. Fixed-order sums.
int64_t layernorm_backward_fused_scratch_bytes(int64_t M, int C);
void layernorm_backward_fused(const float *dy, const float *x, const float *mean, const float *rstd, const float *w,
                              float *dx, bool accumulate, float *dw, float *db, bf16 *dx_bf16, float *dbias_next,
                              int64_t M, int C, float *scratch);
// outs[i][n] += sum_k partials[i][k, n] over `chunks` rows of partial sums, for count <= 3 pairs in
// one launch (fixed order).
void colsum_finish_rows(const float *const *partials, float *const *outs, int count, int64_t chunks, int64_t N);
// Bytes of `scratch` the column sums need for M rows of N columns.
int64_t colsum_scratch_bytes(int64_t M, int64_t N);
// out[n] += sum_m in[m, n]; N % 8 == 0.
void colsum_add(const bf16 *in, float *out, int64_t M, int64_t N, float *scratch);

// out = bf16(in)
void to_bf16(const float *in, bf16 *out, int64_t n);
// Per row r of bf16 logits [R, ld] (V real columns): loss[r] = logsumexp - logit[target[r]]; with
// with_grad, the row is overwritten by (softmax - onehot) * grad_scale in bf16, 0 in the padding columns.
void cross_entropy_inplace(bf16 *logits, int64_t ld, int V, const int32_t *targets, int64_t R, float *loss,
                           bool with_grad, float grad_scale);

// Sum of squares of x[0..n) into out[0] (fp32 partials, fixed order; scratch of 1024 floats).
void sum_squares(const float *x, int64_t n, float *scratch, double *out);

// acc[0] += mean of x[0..n) (one block, fixed order).
void mean_add(const float *x, int64_t n, double *acc);

// AdamW on n elements: g = grad * grad_mult; moments; p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p);
// p_bf16 = bf16(p). With norm_sq (the gradients' sum of squares on the device), grad_mult is instead
// clip_factor(sqrt(*norm_sq), clip), so a step's clipping needs no trip through the host.
void adamw(float *p, bf16 *p_bf16, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
           float eps, float wd, float grad_mult, const double *norm_sq, float clip, float bias1, float bias2);

}  // namespace flashbox::gpt2::train
