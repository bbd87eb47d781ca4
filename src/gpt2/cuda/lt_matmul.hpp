// Row-major linear layers through cuBLASLt: D[M, N] = X[M, K] W[N, K]^T (+ bias[N]) (+ beta D), with
// bf16 X and W, fp32 accumulation, and D in bf16 or fp32 (the bias in D's type). Descriptors and the
// chosen algorithm are cached per shape, so the heuristic runs once per shape, not once per call.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <map>
#include <tuple>

namespace flashbox::gpt2 {

class LtMatmul {
 public:
  LtMatmul();
  ~LtMatmul();
  LtMatmul(const LtMatmul &) = delete;
  LtMatmul &operator=(const LtMatmul &) = delete;

  void run(const __nv_bfloat16 *W, const __nv_bfloat16 *X, void *D, cudaDataType_t d_type, int64_t M, int64_t N,
           int64_t K, int64_t ldd, const void *bias, float beta, cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int, bool>;  // M, N, K, ldd, D type, bias
  Plan &plan(const Key &key);

  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspace_bytes_ = 32u << 20;
  std::map<Key, Plan> plans_;
};

}  // namespace flashbox::gpt2
