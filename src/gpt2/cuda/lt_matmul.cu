#include "gpt2/cuda/lt_matmul.hpp"

#include "gpt2/cuda/cuda_check.hpp"

namespace flashbox::gpt2 {

LtMatmul::LtMatmul() {
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
  cublasLtDestroy(handle_);
}

LtMatmul::Plan &LtMatmul::plan(const Key &key) {
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  const auto [M, N, K, ldd, d_type_int, has_bias] = key;
  const auto d_type = cudaDataType_t(d_type_int);
  Plan p;
  // Column-major view of the row-major product: D^T [N, M] = W [K, N]^T-as-stored (op T) x X^T [K, M].
  GPT2_CUBLAS(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const cublasLtEpilogue_t epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  GPT2_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(K), uint64_t(N), K));
  GPT2_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(K), uint64_t(M), K));
  GPT2_CUBLAS(cublasLtMatrixLayoutCreate(&p.d, d_type, uint64_t(N), uint64_t(M), ldd));

  cublasLtMatmulPreference_t pref;
  GPT2_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  GPT2_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                   sizeof workspace_bytes_));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw Gpt2Error("cuBLASLt has no algorithm for a " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                    std::to_string(K) + " bf16 product (status " + std::to_string(int(st)) + ")");
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void LtMatmul::run(const __nv_bfloat16 *W, const __nv_bfloat16 *X, void *D, cudaDataType_t d_type, int64_t M, int64_t N,
                   int64_t K, int64_t ldd, const void *bias, float beta, cudaStream_t stream) {
  Plan &p = plan({M, N, K, ldd, int(d_type), bias != nullptr});
  if (bias) GPT2_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  const float alpha = 1.0f;
  // C = D (in place) carries the residual stream when beta = 1.
  GPT2_CUBLAS(cublasLtMatmul(handle_, p.desc, &alpha, W, p.a, X, p.b, &beta, D, p.d, D, p.d, &p.algo, workspace_,
                             workspace_bytes_, stream));
}

}  // namespace flashbox::gpt2
