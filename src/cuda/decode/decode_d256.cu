// Decode kernels for head_dim 256, fp16 and bf16: the split kernel at its ring depth and the combine.
#include "cuda/decode/decode_launch.cuh"

namespace flashbox::cuda {

constexpr int kStages256 = decode::kDefaultStages<256>;

cudaError_t launch_decode_split_d256(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_split<__nv_bfloat16, 256, kStages256>(p, s)
              : decode::launch_split<__half, 256, kStages256>(p, s);
}

cudaError_t launch_decode_combine_d256(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_combine<__nv_bfloat16, 256>(p, s) : decode::launch_combine<__half, 256>(p, s);
}

cudaError_t decode_split_occupancy_d256(bool bf16, int *ctas, int64_t *bytes) {
  return bf16 ? decode::occupancy<__nv_bfloat16, 256, kStages256>(ctas, bytes)
              : decode::occupancy<__half, 256, kStages256>(ctas, bytes);
}

}  // namespace flashbox::cuda
