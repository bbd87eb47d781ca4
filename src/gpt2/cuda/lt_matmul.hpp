// The products of GPT-2's linear layers, row-major, through cuBLASLt (bf16 inputs, fp32 accumulation,
// on the legacy default stream), with the descriptors and the algorithm cached per shape, so the
// heuristic runs once per shape, not once per call. The eval forward uses `forward`; the trainer all
// of them:
//   forward  D[M, N] = X[M, K] W[N, K]^T (+ bias[N]) (+ C[M, N])  D bf16 or fp32
//   input    dX[M, K] = dY[M, N] W[N, K]                          dX bf16 or fp32
//   weight   dW[N, K] += dY[M, N]^T X[M, K]                       fp32 accumulation into the gradient
// How each shape's algorithm is chosen, on its first product (LtAlgoChoice):
//   kHeuristic     cuBLASLt's first pick, any reduction scheme (the eval forward).
//   kOrdered       the first pick among algorithms that do not reduce split-K in place (atomics), so
//                  every product repeats bit for bit (the deterministic trainer).
//   kOrderedTuned  up to kTuneCandidates of those, each timed on scratch outputs (the real D is written
//                  once, by the chosen one), the fastest kept; which one wins can differ between runs,
//                  so this is for runs that need not repeat (the trainer with --deterministic 0).
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <map>
#include <tuple>

namespace flashbox::gpt2 {

enum class LtAlgoChoice { kHeuristic, kOrdered, kOrderedTuned };

class LtMatmul {
 public:
  explicit LtMatmul(LtAlgoChoice choice);
  ~LtMatmul();
  LtMatmul(const LtMatmul &) = delete;
  LtMatmul &operator=(const LtMatmul &) = delete;

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
  LtAlgoChoice choice_;
  void *tune_scratch_ = nullptr;
  size_t tune_scratch_bytes_ = 0;

  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspace_bytes_ = 32u << 20;
  std::map<Key, Plan> plans_;
};

}  // namespace flashbox::gpt2
