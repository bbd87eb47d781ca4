// Design: see lt_matmul.hpp. A row-major [r, c] matrix is a column-major [c, r] one, so each row-major
// product is issued as the column-major product of the transposed operands:
//   forward  D^T(N x M) = W^T-as-stored (op T, K x N) x X^T (K x M)
//   input    dX^T(K x M) = W^T (K x N) x dY^T (N x M)
//   weight   dW^T(K x N) = X^T (K x M) x (dY^T)^T (op T, N x M)
#include "gpt2/cuda/lt_matmul.hpp"

#include <string>

#include "gpt2/cuda/cuda_check.hpp"

namespace flashbox::gpt2 {

LtMatmul::LtMatmul(LtAlgoChoice choice) : choice_(choice) {
  GPT2_CUBLAS(cublasLtCreate(&handle_));
  GPT2_CUDA(cudaMalloc(&workspace_, workspace_bytes_));
}

LtMatmul::~LtMatmul() {
  for (auto &[key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
  }
  cudaFree(workspace_);
  cudaFree(tune_scratch_);
  cublasLtDestroy(handle_);
}

cublasLtMatmulAlgo_t LtMatmul::tuned(const Plan &p, const cublasLtMatmulHeuristicResult_t *cands, int n, size_t d_bytes,
                                     const Operands &ops) {
  if (n == 1) return cands[0].algo;
  // Scratch for D and C: 2 x d_bytes, grown as needed, zeroed (beta x garbage could be NaN).
  if (tune_scratch_bytes_ < 2 * d_bytes) {
    GPT2_CUDA(cudaDeviceSynchronize());
    cudaFree(tune_scratch_);
    tune_scratch_ = nullptr;
    tune_scratch_bytes_ = 0;
    GPT2_CUDA(cudaMalloc(&tune_scratch_, 2 * d_bytes));
    tune_scratch_bytes_ = 2 * d_bytes;
  }
  GPT2_CUDA(cudaMemsetAsync(tune_scratch_, 0, 2 * d_bytes, nullptr));
  void *D = tune_scratch_;
  const void *C = static_cast<char *>(tune_scratch_) + d_bytes;
  cudaEvent_t start, stop;
  GPT2_CUDA(cudaEventCreate(&start));
  GPT2_CUDA(cudaEventCreate(&stop));
  const float alpha = 1.0f;
  float best_ms = 0.0f;
  int best = 0;
  for (int i = 0; i < n; ++i) {
    auto launch = [&] {
      return cublasLtMatmul(handle_, p.desc, &alpha, ops.A, p.a, ops.B, p.b, &ops.beta, C, p.d, D, p.d, &cands[i].algo,
                            workspace_, workspace_bytes_, nullptr);
    };
    if (launch() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; a candidate that fails is skipped
    GPT2_CUDA(cudaEventRecord(start, nullptr));
    constexpr int kReps = 4;
    for (int r = 0; r < kReps; ++r) launch();
    GPT2_CUDA(cudaEventRecord(stop, nullptr));
    GPT2_CUDA(cudaEventSynchronize(stop));
    float ms = 0.0f;
    GPT2_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (i == 0 || ms < best_ms) best_ms = ms, best = i;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return cands[best].algo;
}

LtMatmul::Plan &LtMatmul::plan(const Key &key, const Operands &ops) {
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  const auto [ta, tb, m, n, k, lda, ldb, ldd, d_type_int, has_bias, fused] = key;
  const auto d_type = cudaDataType_t(d_type_int);
  Plan p;
  GPT2_CUBLAS(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  cublasLtEpilogue_t epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (fused == 1) epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (fused == 2) epilogue = CUBLASLT_EPILOGUE_DGELU;
  GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  if (fused) {
    // The aux matrix (pre-activation) has D's shape and layout.
    const int64_t aux_ld = ldd;
    GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  }
  if (ops.bias)
    GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ops.bias, sizeof ops.bias));
  if (fused)
    GPT2_CUBLAS(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ops.aux, sizeof ops.aux));
  GPT2_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(ta ? k : m), uint64_t(ta ? m : k), lda));
  GPT2_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(tb ? n : k), uint64_t(tb ? k : n), ldb));
  GPT2_CUBLAS(cublasLtMatrixLayoutCreate(&p.d, d_type, uint64_t(m), uint64_t(n), ldd));

  cublasLtMatmulPreference_t pref;
  GPT2_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  GPT2_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                   sizeof workspace_bytes_));
  if (choice_ != LtAlgoChoice::kHeuristic) {
    // No in-place split-K reduction: it accumulates with atomics in an order that varies run to run.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE);
    GPT2_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                     sizeof schemes));
  }
  const bool tune = choice_ == LtAlgoChoice::kOrderedTuned;
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref,
                                                           tune ? kTuneCandidates : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw Gpt2Error("cuBLASLt has no algorithm for a " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                    std::to_string(k) + " bf16 product (status " + std::to_string(int(st)) + ")");
  const size_t d_bytes = size_t(ldd) * size_t(n) * (d_type == CUDA_R_32F ? 4 : 2);
  p.algo = tune ? tuned(p, results, found, d_bytes, ops) : results[0].algo;
  return plans_.emplace(key, p).first->second;
}

void LtMatmul::gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, const void *B,
                    int64_t ldb, void *D, int64_t ldd, cudaDataType_t d_type, const void *C, float beta,
                    const void *bias, int epilogue, const void *aux) {
  const Key key{ta, tb, m, n, k, lda, ldb, ldd, int(d_type), bias != nullptr, epilogue};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    // The new plan's descriptor needs the pointers before it is tuned.
    plan(key, {A, B, bias, aux, beta});
    it = plans_.find(key);
  }
  Plan &p = it->second;
  if (bias) GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (epilogue)
    GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  const float alpha = 1.0f;
  GPT2_CUBLAS(cublasLtMatmul(handle_, p.desc, &alpha, A, p.a, B, p.b, &beta, C ? C : D, p.d, D, p.d, &p.algo,
                             workspace_, workspace_bytes_, nullptr));
}

void LtMatmul::forward(const __nv_bfloat16 *X, const __nv_bfloat16 *W, void *D, cudaDataType_t d_type, int64_t M,
                       int64_t N, int64_t K, const void *bias, const void *c, int64_t ldd) {
  gemm(true, false, N, M, K, W, K, X, K, D, ldd ? ldd : N, d_type, c, c ? 1.0f : 0.0f, bias);
}

void LtMatmul::input_grad(const __nv_bfloat16 *dY, const __nv_bfloat16 *W, void *dX, cudaDataType_t d_type, int64_t M,
                          int64_t N, int64_t K, float beta, int64_t ldy) {
  gemm(false, false, K, M, N, W, K, dY, ldy ? ldy : N, dX, K, d_type, nullptr, beta, nullptr);
}

void LtMatmul::forward_gelu(const __nv_bfloat16 *X, const __nv_bfloat16 *W, __nv_bfloat16 *G, __nv_bfloat16 *H,
                            int64_t M, int64_t N, int64_t K, const __nv_bfloat16 *bias) {
  gemm(true, false, N, M, K, W, K, X, K, G, N, CUDA_R_16BF, nullptr, 0.0f, bias, 1, H);
}

void LtMatmul::input_grad_dgelu(const __nv_bfloat16 *dY, const __nv_bfloat16 *W, __nv_bfloat16 *dX,
                                const __nv_bfloat16 *H, int64_t M, int64_t N, int64_t K) {
  gemm(false, false, K, M, N, W, K, dY, N, dX, K, CUDA_R_16BF, nullptr, 0.0f, nullptr, 2, H);
}

void LtMatmul::weight_grad(const __nv_bfloat16 *dY, const __nv_bfloat16 *X, float *dW, int64_t M, int64_t N, int64_t K,
                           int64_t ldy) {
  gemm(false, true, K, N, M, X, K, dY, ldy ? ldy : N, dW, K, CUDA_R_32F, nullptr, 1.0f, nullptr);
}

}  // namespace flashbox::gpt2
