// Tile-shape sweep for the sm80 flash forward kernel: times the production kernel
// (src/cuda/forward/sm80/flash_fwd_sm80.cu, included here so the same template is measured) with other
// (BlockM, BlockN, warps, stages) choices on the SPEC shapes, bf16, and checks every variant's output
// against the production variant's (any CTA order must give the same bits). Prints one line per
// (variant, order, T): median ms of 30 CUDA-event timed launches after 5 warm-ups, TFLOP/s, max |diff|.
// Build (on the GPU machine):
//   nvcc -std=c++20 -O3 --use_fast_math -gencode=arch=compute_90a,code=sm_90a -I src \
//        bench/sm80_tile_sweep.cu -o sweep && ./sweep [causal=1]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "../src/cuda/forward/sm80/flash_fwd_sm80.cu"

using namespace flashbox::cuda;

#define CK(x) \
  do { \
    cudaError_t e = (x); \
    if (e != cudaSuccess) { \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1); \
    } \
  } while (0)

struct Problem {
  int B, H, T, D;
  __nv_bfloat16 *q, *k, *v, *o, *o_ref;
  FlashFwdParams p;
};

Problem make_problem(int B, int H, int T, int D, int causal) {
  Problem pr{B, H, T, D};
  const size_t n = size_t(B) * H * T * D;
  std::vector<__nv_bfloat16> h(n);
  std::mt19937 rng(1234 + T + D);
  std::normal_distribution<float> nd;
  for (auto &x : h) x = __float2bfloat16(nd(rng));
  for (auto **ptr : {&pr.q, &pr.k, &pr.v, &pr.o, &pr.o_ref}) CK(cudaMalloc(ptr, n * 2));
  CK(cudaMemcpy(pr.q, h.data(), n * 2, cudaMemcpyHostToDevice));
  for (auto &x : h) x = __float2bfloat16(nd(rng));
  CK(cudaMemcpy(pr.k, h.data(), n * 2, cudaMemcpyHostToDevice));
  for (auto &x : h) x = __float2bfloat16(nd(rng));
  CK(cudaMemcpy(pr.v, h.data(), n * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(pr.o, 0xff, n * 2));  // NaN poison: a CTA that writes nothing shows as maxdiff inf
  FlashFwdParams &p = pr.p;
  p = FlashFwdParams{};
  p.q = pr.q, p.k = pr.k, p.v = pr.v, p.o = pr.o, p.lse = nullptr;
  // BHTD: strides (batch, seq, head)
  const int64_t sb = int64_t(H) * T * D, ss = D, sh = int64_t(T) * D;
  p.q_batch = p.k_batch = p.v_batch = p.o_batch = sb;
  p.q_seq = p.k_seq = p.v_seq = p.o_seq = ss;
  p.q_head = p.k_head = p.v_head = p.o_head = sh;
  p.batch = B, p.seqlen_q = p.seqlen_k = T, p.heads_q = p.heads_kv = H, p.group = 1;
  p.scale_log2 = float(1.0 / std::sqrt(double(D)) * 1.4426950408889634);
  p.causal = causal;
  return pr;
}

void free_problem(Problem &pr) {
  for (void *x : {(void *)pr.q, (void *)pr.k, (void *)pr.v, (void *)pr.o, (void *)pr.o_ref}) cudaFree(x);
}

template <class Tr>
void time_variant(Problem &pr, bool is_ref, int section_heads) {
  FlashFwdParams p = pr.p;
  p.o = is_ref ? pr.o_ref : pr.o;
  p.section_heads = section_heads;
  std::vector<float> ms;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 35; ++i) {
    CK(cudaEventRecord(a));
    CK((launch<__nv_bfloat16, Tr>(p, nullptr)));
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    if (i >= 5) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const size_t n = size_t(pr.B) * pr.H * pr.T * pr.D;
  double maxdiff = 0;
  if (!is_ref) {
    std::vector<__nv_bfloat16> x(n), y(n);
    CK(cudaMemcpy(x.data(), pr.o, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y.data(), pr.o_ref, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) {
      const double d = std::abs(double(__bfloat162float(x[i])) - double(__bfloat162float(y[i])));
      maxdiff = std::isnan(d) ? INFINITY : std::max(maxdiff, d);
    }
    CK(cudaMemset(pr.o, 0xff, n * 2));  // NaN poison for the next variant
  }
  const double flops = 4.0 * pr.B * pr.H * double(pr.T) * pr.T * pr.D * (pr.p.causal ? 0.5 : 1.0);
  std::printf("d%-3d %3dx%-3d/%-3d w%d s%d cta>=%d q%s sec%-3d T=%5d  %8.3f ms  %6.1f TFLOP/s  maxdiff %.3g%s\n",
              Tr::kHeadDim, Tr::kBlockM, Tr::kBlockN, Tr::kSubN, Tr::kWarps, Tr::kStages, Tr::kMinBlocksPerSM,
              Tr::kQInRegisters ? "reg" : "smem", section_heads, pr.T, med, flops / (med * 1e-3) / 1e12, maxdiff,
              is_ref ? " (production, one section)" : "");
  std::fflush(stdout);
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
}

// v6 (sweep 1) timed the CTA order (heads per L2 section: one section = every head's last block
// first, the order before v6; 1 = head by head) at S = 1 ... 16 and a 256-row d=128 tile of 8 warps;
// bench/results/2026-11-29_sm80_forward_v6/sweep1.log has those numbers. This sweep times the launch's own choice
// (choose_section_heads, a makespan model) against one section, twice each, per T.
template <class Tr>
void order_vs_auto(Problem &pr) {
  const int all = pr.B * pr.H;
  const int chosen = choose_section_heads<__nv_bfloat16, Tr>(pr.p);
  time_variant<Tr>(pr, true, all);
  time_variant<Tr>(pr, false, chosen);
  time_variant<Tr>(pr, false, all);
  time_variant<Tr>(pr, false, chosen);
}

int main(int argc, char **argv) {
  const int causal = argc > 1 ? std::atoi(argv[1]) : 1;
  for (int T : {1024, 2048, 4096, 8192, 16384}) {
    Problem pr = make_problem(4, 12, T, 64, causal);
    order_vs_auto<TraitsD64>(pr);
    free_problem(pr);
  }
  for (int T : {1024, 2048, 4096, 8192, 16384}) {
    Problem pr = make_problem(4, 16, T, 128, causal);
    order_vs_auto<TraitsD128>(pr);
    free_problem(pr);
  }
  return 0;
}
