// CUDA backward entry point (FlashAttention-2 §3.2): allocates the scratch (D = rowsum(dO ∘ O), and
// the fp32 dQ accumulator unless deterministic), then runs
//   rowsum -> dK/dV kernel (dQ by atomicAdd) -> convert dQ           (deterministic = 0)
//   rowsum -> dK/dV kernel -> dQ kernel (one owner per Q block)      (deterministic = 1)
// on the caller's stream. On an sm_90 device the Hopper kernels (src/cuda/backward/sm90: wgmma, TMA,
// dQ by bulk reduce-add) take every non-deterministic call whose layout the TMA can describe;
// FLASHBOX_BWD_ARCH=sm80 forces the path above. Scratch is freed stream-ordered; the call does not
// synchronise.
#include <cuda_runtime.h>

#include <string>

#include "api/backends.hpp"
#include "core/call_state.hpp"
#include "core/error.hpp"
#include "cpu/reference_fp64.hpp"
#include "cuda/backward/sm80/flash_bwd_params.hpp"
#ifdef FLASHBOX_HAVE_SM90
#include "cuda/backward/sm90/flash_bwd_sm90_launch.hpp"
#endif

namespace flashbox::detail {
namespace {

using cuda::bwd::BwdParams;

int64_t rowsum_bytes(const flashbox_attention_args &a) { return a.batch * a.heads_q * a.seqlen_q * 4; }
int64_t dq_accum_bytes(const flashbox_attention_args &a) { return a.batch * a.heads_q * a.seqlen_q * a.head_dim * 4; }

std::string cuda_text(cudaError_t e, const char *what) {
  return std::string("cuda backward: ") + what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
         ")";
}

// Device scratch of one call: stream-ordered allocation, freed (and counted as freed) on scope exit.
class DeviceScratch {
 public:
  explicit DeviceScratch(cudaStream_t s) : stream_(s) {}
  DeviceScratch(const DeviceScratch &) = delete;
  DeviceScratch &operator=(const DeviceScratch &) = delete;
  ~DeviceScratch() {
    for (int i = 0; i < n_; ++i) {
      cudaFreeAsync(ptr_[i], stream_);
      note_scratch_free(bytes_[i]);
    }
  }
  cudaError_t allocate(float **out, int64_t bytes) {
    void *p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, size_t(bytes), stream_);
    if (e != cudaSuccess) return e;
    ptr_[n_] = p, bytes_[n_] = bytes, ++n_;
    note_scratch_alloc(bytes);
    *out = static_cast<float *>(p);
    return cudaSuccess;
  }

 private:
  cudaStream_t stream_;
  void *ptr_[3] = {nullptr, nullptr, nullptr};
  int64_t bytes_[3] = {0, 0, 0};
  int n_ = 0;
};

}  // namespace

int64_t cuda_backward_workspace_size(const flashbox_attention_grad_args &g) {
#ifdef FLASHBOX_HAVE_SM90
  sm90::bwd::Plan plan;
  if (sm90::bwd::plan_backward(g, &plan, nullptr)) return 2 * plan.vec_bytes + plan.dq_accum_bytes;
#endif
  return rowsum_bytes(g.fwd) + (g.deterministic ? 0 : dq_accum_bytes(g.fwd));
}

int cuda_flash_backward(const flashbox_attention_grad_args &g) {
  const flashbox_attention_args &a = g.fwd;
  if (a.dtype != FLASHBOX_BFLOAT16 && a.dtype != FLASHBOX_FLOAT16)
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, "cuda flash backward: dtype must be bf16 or fp16 (got " +
                                                    std::to_string(int(a.dtype)) + ")");
  if (a.head_dim != 64 && a.head_dim != 128)
    return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                "cuda flash backward: head_dim must be 64 or 128 (got " + std::to_string(a.head_dim) + ")");
  // Grids are (blocks of 64 or 128 rows, batch · heads): gridDim.y <= 65535 bounds batch · heads.
  if (a.seqlen_q > (int64_t(1) << 30) || a.seqlen_k > (int64_t(1) << 30) || a.batch * a.heads_q > 65535)
    return fail(FLASHBOX_ERR_INVALID_SIZE,
                "cuda flash backward: needs seqlen_q, seqlen_k <= 2^30 and batch * heads_q <= 65535 (got seqlen_q " +
                    std::to_string(a.seqlen_q) + ", seqlen_k " + std::to_string(a.seqlen_k) + ", batch * heads_q " +
                    std::to_string(a.batch * a.heads_q) + ")");
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return fail(FLASHBOX_ERR_CUDA, "cuda flash backward: cannot query the device's compute capability");
  }
  if (major < 8)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL, "cuda flash backward needs compute capability 8.0 or newer (mma.sync "
                                               "bf16, cp.async); this device is " + std::to_string(major) + ".x");

  cudaStream_t stream = static_cast<cudaStream_t>(a.stream);
  (void)cudaGetLastError();  // a sticky error of an earlier unrelated call must not be blamed on this one
#ifdef FLASHBOX_HAVE_SM90
  if (sm90::bwd::Plan plan; sm90::bwd::plan_backward(g, &plan, nullptr)) {
    DeviceScratch scratch(stream);
    float *lse_log2 = nullptr, *dsum = nullptr, *dq_accum = nullptr;
    cudaError_t e = scratch.allocate(&lse_log2, plan.vec_bytes);
    if (e == cudaSuccess) e = scratch.allocate(&dsum, plan.vec_bytes);
    if (e == cudaSuccess) e = scratch.allocate(&dq_accum, plan.dq_accum_bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "cuda backward: cannot allocate " +
                                                  std::to_string(2 * plan.vec_bytes + plan.dq_accum_bytes) +
                                                  " bytes of scratch");
    }
    if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "cudaMallocAsync"));
    if ((e = sm90::bwd::run_backward(g, plan, lse_log2, dsum, dq_accum)) != cudaSuccess)
      return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "sm90 backward launch"));
    set_kernel_name("cuda_flash_bwd_sm90_d" + std::to_string(a.head_dim));
    return FLASHBOX_OK;
  }
#endif
  const bool bf16 = a.dtype == FLASHBOX_BFLOAT16, det = g.deterministic != 0;

  BwdParams p{};
  p.q = a.q, p.k = a.k, p.v = a.v, p.o = a.o, p.dout = g.dout;
  p.dq = g.dq, p.dk = g.dk, p.dv = g.dv, p.lse = a.lse;
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = a.q_stride[i], p.k_stride[i] = a.k_stride[i], p.v_stride[i] = a.v_stride[i];
    p.o_stride[i] = a.o_stride[i], p.do_stride[i] = g.dout_stride[i];
    p.dq_stride[i] = g.dq_stride[i], p.dk_stride[i] = g.dk_stride[i], p.dv_stride[i] = g.dv_stride[i];
  }
  p.batch = int(a.batch), p.seqlen_q = int(a.seqlen_q), p.seqlen_k = int(a.seqlen_k);
  p.heads_q = int(a.heads_q), p.heads_kv = int(a.heads_kv), p.group = int(a.heads_q / a.heads_kv);
  p.scale = float(cpu::effective_softmax_scale(a));
  p.scale_log2 = p.scale * cuda::bwd::kLog2e;
  p.causal = a.causal;

  DeviceScratch scratch(stream);
  cudaError_t e = scratch.allocate(&p.dsum, rowsum_bytes(a));
  if (e == cudaSuccess && !det) e = scratch.allocate(&p.dq_accum, dq_accum_bytes(a));
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "cuda backward: cannot allocate " +
                                                std::to_string(cuda_backward_workspace_size(g)) + " bytes of scratch");
  }
  if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "cudaMallocAsync"));

  if ((e = cuda::bwd::launch_bwd_rowsum(p, bf16, int(a.head_dim), stream)) != cudaSuccess)
    return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "rowsum kernel launch"));
  if (!det && (e = cudaMemsetAsync(p.dq_accum, 0, size_t(dq_accum_bytes(a)), stream)) != cudaSuccess)
    return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "cudaMemsetAsync of the dQ accumulator"));
  e = a.head_dim == 64 ? cuda::bwd::launch_flash_bwd<64>(p, bf16, det, stream)
                       : cuda::bwd::launch_flash_bwd<128>(p, bf16, det, stream);
  if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "flash backward kernel launch"));
  if (!det && (e = cuda::bwd::launch_bwd_convert_dq(p, bf16, int(a.head_dim), stream)) != cudaSuccess)
    return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "dQ convert kernel launch"));

  set_kernel_name(std::string("cuda_flash_bwd_sm80_d") + std::to_string(a.head_dim) + (det ? "_deterministic" : ""));
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
