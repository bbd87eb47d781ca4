// The decode kernels of each head_dim and dtype (the split kernel at its default ring depth, its e4m3
// cache variant at kFp8Stages, and the combine, which both share), as decode_api.cpp calls them through
// decode_params.hpp: a call's head_dim runs on the next instantiation up (64, 128, 256). The
// instantiations are the kernel table's (scripts/generate_kernels.py, instantiations/decode_d*.cu).
#include <type_traits>

#include "cuda/decode/decode_instances.hpp"
#include "cuda/decode/decode_launch.cuh"
#include "cuda/decode/decode_params.hpp"

namespace flashbox::cuda {
namespace {

using decode::kFp8Stages;
using Fp8 = __nv_fp8_e4m3;

// One instantiation's calls in either 2-byte dtype, with a cache in that dtype or in e4m3.
template <int D>
struct DecodeKernels {
  static constexpr int kStages = decode::kDefaultStages<D>;
  static constexpr int kStages8 = kFp8Stages<D>;
  static cudaError_t split(const DecodeParams &p, bool bf16, bool fp8, cudaStream_t s) {
    if (fp8)
      return bf16 ? decode::launch_split<__nv_bfloat16, D, kStages8, Fp8>(p, s)
                  : decode::launch_split<__half, D, kStages8, Fp8>(p, s);
    return bf16 ? decode::launch_split<__nv_bfloat16, D, kStages>(p, s) : decode::launch_split<__half, D, kStages>(p, s);
  }
  static cudaError_t combine(const DecodeParams &p, bool bf16, cudaStream_t s) {
    return bf16 ? decode::launch_combine<__nv_bfloat16, D>(p, s) : decode::launch_combine<__half, D>(p, s);
  }
  static cudaError_t occupancy(bool bf16, bool fp8, int *ctas, int64_t *bytes) {
    if (fp8)
      return bf16 ? decode::occupancy<__nv_bfloat16, D, kStages8, Fp8>(ctas, bytes)
                  : decode::occupancy<__half, D, kStages8, Fp8>(ctas, bytes);
    return bf16 ? decode::occupancy<__nv_bfloat16, D, kStages>(ctas, bytes)
                : decode::occupancy<__half, D, kStages>(ctas, bytes);
  }
};

// f(DecodeKernels<D>{}) for the instantiation that serves head_dim.
template <class F>
cudaError_t with_kernels(int head_dim, F &&f) {
  switch (decode_kernel_dim(head_dim)) {
    case 64: return f(DecodeKernels<64>{});
    case 128: return f(DecodeKernels<128>{});
    default: return f(DecodeKernels<256>{});
  }
}

}  // namespace

int decode_kernel_dim(int head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }

cudaError_t launch_decode_split(const DecodeParams &p, int head_dim, bool bf16, bool fp8, cudaStream_t stream,
                                const char **kernel_name) {
  static constexpr const char *kNames[3][2][2] = {
      {{"cuda_decode_split_d64_fp16", "cuda_decode_split_d64_bf16"},
       {"cuda_decode_split_d64_fp16_e4m3cache", "cuda_decode_split_d64_bf16_e4m3cache"}},
      {{"cuda_decode_split_d128_fp16", "cuda_decode_split_d128_bf16"},
       {"cuda_decode_split_d128_fp16_e4m3cache", "cuda_decode_split_d128_bf16_e4m3cache"}},
      {{"cuda_decode_split_d256_fp16", "cuda_decode_split_d256_bf16"},
       {"cuda_decode_split_d256_fp16_e4m3cache", "cuda_decode_split_d256_bf16_e4m3cache"}}};
  const int d = decode_kernel_dim(head_dim);
  *kernel_name = kNames[d == 64 ? 0 : d == 128 ? 1 : 2][fp8 ? 1 : 0][bf16 ? 1 : 0];
  return with_kernels(head_dim, [&](auto k) { return k.split(p, bf16, fp8, stream); });
}

cudaError_t launch_decode_combine(const DecodeParams &p, int head_dim, bool bf16, cudaStream_t stream) {
  return with_kernels(head_dim, [&](auto k) { return k.combine(p, bf16, stream); });
}

cudaError_t decode_split_occupancy(int head_dim, bool bf16, bool fp8, int *ctas_per_sm, int64_t *bytes_in_flight) {
  return with_kernels(head_dim, [&](auto k) { return k.occupancy(bf16, fp8, ctas_per_sm, bytes_in_flight); });
}

}  // namespace flashbox::cuda
