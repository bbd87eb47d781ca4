// Decode kernels for head_dim 128, fp16 and bf16: the split kernel at its ring depth and the combine.
#include "cuda/decode/decode_launch.cuh"

namespace flashbox::cuda {

constexpr int kStages128 = decode::kDefaultStages<128>;

cudaError_t launch_decode_split_d128(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_split<__nv_bfloat16, 128, kStages128>(p, s)
              : decode::launch_split<__half, 128, kStages128>(p, s);
}

cudaError_t launch_decode_combine_d128(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_combine<__nv_bfloat16, 128>(p, s) : decode::launch_combine<__half, 128>(p, s);
}

cudaError_t decode_split_occupancy_d128(bool bf16, int *ctas, int64_t *bytes) {
  return bf16 ? decode::occupancy<__nv_bfloat16, 128, kStages128>(ctas, bytes)
              : decode::occupancy<__half, 128, kStages128>(ctas, bytes);
}

}  // namespace flashbox::cuda
