// The three products of a linear layer in training, row-major, through cuBLASLt (bf16 inputs, fp32
// accumulation), with the descriptors and the algorithm cached per shape:
//   forward  D[M, N] = X[M, K] W[N, K]^T (+ bias[N]) (+ C[M, N])  D bf16 or fp32
//   input    dX[M, K] = dY[M, N] W[N, K]                          dX bf16 or fp32
//   weight   dW[N, K] += dY[M, N]^T X[M, K]                       fp32 accumulation into the gradient
// Split-K algorithms that reduce in place (atomics) are excluded, so every product is deterministic.
// With tuning on (set_tuning), the first product of each shape times up to kTuneCandidates of the
// heuristic's algorithms on scratch outputs (the real D is written once, by the chosen one) and keeps
// the fastest; which one wins can differ between runs, so tuning is only for non-deterministic runs.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <map>
#include <tuple>

namespace flashbox::gpt2::train {

class LtGemm {
 public:
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm &) = delete;
  LtGemm &operator=(const LtGemm &) = delete;

  // c == nullptr: no addend. The bias has D's type.
  void forward(const __nv_bfloat16 *X, const __nv_bfloat16 *W, void *D, cudaDataType_t d_type, int64_t M, int64_t N,
               int64_t K, const void *bias, const void *c, int64_t ldd = 0);
  void input_grad(const __nv_bfloat16 *dY, const __nv_bfloat16 *W, void *dX, cudaDataType_t d_type, int64_t M,
                  int64_t N, int64_t K, float beta = 0.0f, int64_t ldy = 0);
  void weight_grad(const __nv_bfloat16 *dY, const __nv_bfloat16 *X, float *dW, int64_t M, int64_t N, int64_t K,
                   int64_t ldy = 0);
  // The MLP's GELU fused into the products (cuBLASLt's tanh GELU epilogues, bf16 throughout):
  //   forward  G[M, N] = gelu(X W^T + bias), the pre-activation kept in H[M, N]
  //   input    dX[M, K] = (dY[M, N] W[N, K]) * gelu'(H[M, K])
  void forward_gelu(const __nv_bfloat16 *X, const __nv_bfloat16 *W, __nv_bfloat16 *G, __nv_bfloat16 *H, int64_t M,
                    int64_t N, int64_t K, const __nv_bfloat16 *bias);
  void set_tuning(bool on) { tune_ = on; }
  void input_grad_dgelu(const __nv_bfloat16 *dY, const __nv_bfloat16 *W, __nv_bfloat16 *dX, const __nv_bfloat16 *H,
                        int64_t M, int64_t N, int64_t K);

 private:
  // Column-major D(m x n) = op(A) op(B) (+ beta C) (+ bias[m]).
  // epilogue 0: none or bias; 1: GELU with aux (+ bias); 2: DGELU with aux.
  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda, const void *B, int64_t ldb,
            void *D, int64_t ldd, cudaDataType_t d_type, const void *C, float beta, const void *bias, int epilogue = 0,
            const void *aux = nullptr);
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, int>;
  struct Operands {
    const void *A, *B, *bias, *aux;
    float beta;
  };
  Plan &plan(const Key &key, const Operands &ops);
  // The fastest of the heuristic's candidates, timed on scratch D (and C) of the product's size.
  cublasLtMatmulAlgo_t tuned(const Plan &p, const cublasLtMatmulHeuristicResult_t *cands, int n, size_t d_bytes,
                             const Operands &ops);

  static constexpr int kTuneCandidates = 8;
  bool tune_ = false;
  void *tune_scratch_ = nullptr;
  size_t tune_scratch_bytes_ = 0;

  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspace_bytes_ = 32u << 20;
  std::map<Key, Plan> plans_;
};

}  // namespace flashbox::gpt2::train
