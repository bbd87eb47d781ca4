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
// dx += LN's input gradient for output gradient dy (fp32).
void layernorm_backward_dx(const float *dy, const float *x, const float *mean, const float *rstd, const float *w,
                           float *dx, int64_t M, int C);
// dw += sum_m dy * xhat, db += sum_m dy (partial sums over row chunks, then a fixed-order sum).
// fast: the fused path's reduction shape (64-row partials, warp-wide final sums); a different fixed
// order, so the plain path's results stay what they were.
void layernorm_backward_params(const float *dy, const float *x, const float *mean, const float *rstd, float *dw,
                               float *db, int64_t M, int C, float *scratch, bool fast);
// The fused path's LayerNorm backward in one pass (layernorm_backward.cu): dx = (accumulate ? dx : 0)
// + LN's input gradient; dw += sum_m dy xhat; db += sum_m dy; with dx_bf16 set, also dx_bf16 =
// bf16(dx) and dbias_next += sum_m dx (the bias gradient of the projection that produced this
// residual), which saves the next layer down a pass over dx. Fixed-order sums.
int64_t layernorm_backward_fused_scratch_bytes(int64_t M, int C);
void layernorm_backward_fused(const float *dy, const float *x, const float *mean, const float *rstd, const float *w,
                              float *dx, bool accumulate, float *dw, float *db, bf16 *dx_bf16, float *dbias_next,
                              int64_t M, int C, float *scratch);
// outs[i][n] += sum_k partials[i][k, n] over `chunks` rows of partial sums, for count <= 3 pairs in
// one launch (the fused path's fixed order).
void colsum_finish_rows(const float *const *partials, float *const *outs, int count, int64_t chunks, int64_t N);
// Bytes of `scratch` the column sums need for M rows of N columns.
int64_t colsum_scratch_bytes(int64_t M, int64_t N);
// out[n] += sum_m in[m, n] (fp32 or bf16 input).
void colsum_add(const float *in, float *out, int64_t M, int64_t N, float *scratch, bool fast);
void colsum_add(const bf16 *in, float *out, int64_t M, int64_t N, float *scratch, bool fast);

// out = gelu_tanh(in), bf16.
void gelu_forward(const bf16 *in, bf16 *out, int64_t n);
// d = d * gelu_tanh'(pre), in place, bf16.
void gelu_backward(const bf16 *pre, bf16 *d, int64_t n);

// out = bf16(in)
void to_bf16(const float *in, bf16 *out, int64_t n);
// qkv[m] = [dq[m] | dk[m] | dv[m]] rows of C each.
void interleave_qkv(const bf16 *dq, const bf16 *dk, const bf16 *dv, bf16 *dqkv, int64_t M, int C);

// Per row r of fp32 logits [R, ld] (V real columns): loss[r] = logsumexp - logit[target[r]]; when
// dlogits is set, dlogits[r, :] = (softmax - onehot) * grad_scale in bf16, 0 in the padding columns.
void cross_entropy(const float *logits, int64_t ld, int V, const int32_t *targets, int64_t R, float *loss,
                   bf16 *dlogits, float grad_scale);

// The same on bf16 logits, the gradient written in place over them (the fused path's LM head).
void cross_entropy_inplace(bf16 *logits, int64_t ld, int V, const int32_t *targets, int64_t R, float *loss,
                           bool with_grad, float grad_scale);
// out = bf16(in) and bias[n] += sum_m in[m, n] in one pass over in [M, N].
void to_bf16_colsum_add(const float *in, bf16 *out, float *bias, int64_t M, int64_t N, float *scratch);

// Sum of squares of x[0..n) into out[0] (fp32 partials, fixed order; scratch of 1024 floats).
void sum_squares(const float *x, int64_t n, float *scratch, double *out);

// acc[0] += mean of x[0..n) (one block, fixed order).
void mean_add(const float *x, int64_t n, double *acc);

// AdamW on n elements: g = grad * grad_mult; moments; p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p);
// p_bf16 = bf16(p).
void adamw(float *p, bf16 *p_bf16, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
           float eps, float wd, float grad_mult, float bias1, float bias2);

}  // namespace flashbox::gpt2::train
