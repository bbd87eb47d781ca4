// Decode kernels for head_dim 64, fp16 and bf16: the split kernel at its ring depth and the combine.
#include "cuda/decode/decode_launch.cuh"

namespace flashbox::cuda {

constexpr int kStages64 = decode::kDefaultStages<64>;

cudaError_t launch_decode_split_d64(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_split<__nv_bfloat16, 64, kStages64>(p, s)
              : decode::launch_split<__half, 64, kStages64>(p, s);
}

cudaError_t launch_decode_combine_d64(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_combine<__nv_bfloat16, 64>(p, s) : decode::launch_combine<__half, 64>(p, s);
}

cudaError_t decode_split_occupancy_d64(bool bf16, int *ctas, int64_t *bytes) {
  return bf16 ? decode::occupancy<__nv_bfloat16, 64, kStages64>(ctas, bytes)
              : decode::occupancy<__half, 64, kStages64>(ctas, bytes);
}

}  // namespace flashbox::cuda
