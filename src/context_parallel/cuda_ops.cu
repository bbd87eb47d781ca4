// DeviceOps on a GPU: stream-ordered memory (cudaMallocAsync), streams, events, and two small
// memory-bound kernels.
//
// copy_rows: one thread per element of n0 x n1 x n2 rows of `width` elements, converting between
//   fp32/fp16/bf16 with the dtype chosen at run time (uniform per launch, so the switch costs no
//   divergence); used to pack K/V, gather LSE slices, accumulate dQ/dK/dV partials in fp32 and write
//   the final outputs. Not tuned: it moves O(S) bytes per step against the attention's O(S^2) work.
// merge: one warp per query row. Lane 0 reads the two LSEs, every lane computes the same weights
//   (merge_math.hpp), the warp combines head_dim elements lane-strided, then lane 0 writes the merged
//   LSE after __syncwarp, so no lane reads an LSE another has already overwritten. Built without
//   --use_fast_math: expf/log1pf are the accurate ones, so the merge is fp32-exact up to rounding.
// Both are one instantiation each (docs/context-parallel.md: the compile cost is two small kernels).
// Memory is stream-ordered from the device's default pool.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "context_parallel/cp_error.hpp"
#include "context_parallel/device_ops.hpp"
#include "context_parallel/merge_math.hpp"

namespace flashbox::cp {
namespace {

__device__ inline float load_elem(const void *p, int dtype, int64_t i) {
  switch (dtype) {
    case FLASHBOX_FLOAT16: return __half2float(static_cast<const __half *>(p)[i]);
    case FLASHBOX_BFLOAT16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    default: return static_cast<const float *>(p)[i];
  }
}

__device__ inline void store_elem(void *p, int dtype, int64_t i, float v) {
  switch (dtype) {
    case FLASHBOX_FLOAT16: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
    case FLASHBOX_BFLOAT16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float *>(p)[i] = v; break;
  }
}

__global__ void copy_rows_kernel(RowCopy c, int64_t total) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = e % c.width;
    int64_t row = e / c.width;
    const int64_t r = row % c.n[2];
    row /= c.n[2];
    const int64_t b = row % c.n[1];
    const int64_t a = row / c.n[1];
    const int64_t d = a * c.dst_stride[0] + b * c.dst_stride[1] + r * c.dst_stride[2] + x;
    float v = c.fill;
    if (c.src) v = load_elem(c.src, c.src_dtype, a * c.src_stride[0] + b * c.src_stride[1] + r * c.src_stride[2] + x);
    if (c.accumulate) v += static_cast<float *>(c.dst)[d];
    store_elem(c.dst, c.dst_dtype, d, v);
  }
}

__global__ void merge_kernel(MergeArgs m, int64_t rows) {
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together: rows are warp-granular
  const int64_t r = row % m.n[2], b = (row / m.n[2]) % m.n[1], a = row / (m.n[2] * m.n[1]);
  auto off = [&](const int64_t *s) { return a * s[0] + b * s[1] + r * s[2]; };
  float *acc_lse = m.acc_lse + off(m.acc_lse_stride);
  const MergeWeights w = merge_weights(*acc_lse, m.part_lse[off(m.part_lse_stride)]);
  float *o = m.acc_o + off(m.acc_o_stride);
  const int64_t po = off(m.part_o_stride);
  for (int64_t x = lane; x < m.head_dim; x += 32)
    o[x] = merge_value(w, o[x], load_elem(m.part_o, m.part_dtype, po + x));
  __syncwarp();
  if (lane == 0) *acc_lse = w.lse;
}

int cuda_fail(cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return fail(FLASHBOX_ERR_CUDA, std::string(what) + ": " + cudaGetErrorString(e));
}

int grid_for(int64_t threads, int block) {
  const int64_t g = (threads + block - 1) / block;
  return int(g < 65535 * 16 ? g : 65535 * 16);
}

class CudaOps final : public DeviceOps {
 public:
  flashbox_device device() const override { return FLASHBOX_CUDA; }
  int alloc(void **p, size_t bytes, Stream s) override {
    *p = nullptr;
    if (bytes == 0) return 0;
    const cudaError_t e = cudaMallocAsync(p, bytes, cudaStream_t(s));
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "cudaMallocAsync of " + std::to_string(bytes) + " bytes: out of memory");
    }
    return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMallocAsync");
  }
  void release(void *p, Stream s) override {
    if (p && cudaFreeAsync(p, cudaStream_t(s)) != cudaSuccess) (void)cudaGetLastError();
  }
  int create_stream(Stream *s) override {
    cudaStream_t st = nullptr;
    const cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    *s = st;
    return e == cudaSuccess ? 0 : cuda_fail(e, "cudaStreamCreate");
  }
  void destroy_stream(Stream s) override {
    if (s) cudaStreamDestroy(cudaStream_t(s));
  }
  int create_event(Event *ev) override {
    cudaEvent_t e = nullptr;
    const cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    *ev = e;
    return r == cudaSuccess ? 0 : cuda_fail(r, "cudaEventCreate");
  }
  void destroy_event(Event e) override {
    if (e) cudaEventDestroy(cudaEvent_t(e));
  }
  int record(Event e, Stream s) override {
    const cudaError_t r = cudaEventRecord(cudaEvent_t(e), cudaStream_t(s));
    return r == cudaSuccess ? 0 : cuda_fail(r, "cudaEventRecord");
  }
  int wait(Stream s, Event e) override {
    const cudaError_t r = cudaStreamWaitEvent(cudaStream_t(s), cudaEvent_t(e), 0);
    return r == cudaSuccess ? 0 : cuda_fail(r, "cudaStreamWaitEvent");
  }
  int synchronize(Stream s) override {
    const cudaError_t r = cudaStreamSynchronize(cudaStream_t(s));
    return r == cudaSuccess ? 0 : cuda_fail(r, "cudaStreamSynchronize");
  }
  int copy_bytes(void *dst, const void *src, size_t bytes, Stream s) override {
    if (!bytes) return 0;
    const cudaError_t r = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cudaStream_t(s));
    return r == cudaSuccess ? 0 : cuda_fail(r, "cudaMemcpyAsync");
  }
  int copy_rows(const RowCopy &c, Stream s) override {
    const int64_t total = c.n[0] * c.n[1] * c.n[2] * c.width;
    if (total <= 0) return 0;
    copy_rows_kernel<<<grid_for(total, 256), 256, 0, cudaStream_t(s)>>>(c, total);
    const cudaError_t r = cudaGetLastError();
    return r == cudaSuccess ? 0 : cuda_fail(r, "copy_rows_kernel launch");
  }
  int merge(const MergeArgs &m, Stream s) override {
    const int64_t rows = m.n[0] * m.n[1] * m.n[2];
    if (rows <= 0) return 0;
    const int64_t blocks = (rows * 32 + 255) / 256;
    merge_kernel<<<unsigned(blocks), 256, 0, cudaStream_t(s)>>>(m, rows);
    const cudaError_t r = cudaGetLastError();
    return r == cudaSuccess ? 0 : cuda_fail(r, "merge_kernel launch");
  }
};

}  // namespace

std::unique_ptr<DeviceOps> make_cuda_ops() { return std::make_unique<CudaOps>(); }

}  // namespace flashbox::cp
