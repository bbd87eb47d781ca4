// Decode kernels for head_dim 128: split kernel (fp16, bf16 at the default ring depth; bf16 also at 2
// and 6 stages for FLASHBOX_DECODE_STAGES, the ring-depth experiment of docs/decode.md) and combine.
#include "cuda/decode/decode_launch.cuh"

namespace flashbox::cuda {

cudaError_t launch_decode_split_d128(const DecodeParams &p, bool bf16, int stages, cudaStream_t s) {
  using decode::launch_split;
  if (!bf16) return launch_split<__half, 128, decode::kDefaultStages<128>>(p, s);
  if (stages == 2) return launch_split<__nv_bfloat16, 128, 2>(p, s);
  if (stages == 6) return launch_split<__nv_bfloat16, 128, 6>(p, s);
  return launch_split<__nv_bfloat16, 128, decode::kDefaultStages<128>>(p, s);
}

cudaError_t launch_decode_combine_d128(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_combine<__nv_bfloat16, 128>(p, s) : decode::launch_combine<__half, 128>(p, s);
}

cudaError_t decode_split_occupancy_d128(bool bf16, int stages, int *ctas, int64_t *bytes) {
  using decode::occupancy;
  if (!bf16) return occupancy<__half, 128, decode::kDefaultStages<128>>(ctas, bytes);
  if (stages == 2) return occupancy<__nv_bfloat16, 128, 2>(ctas, bytes);
  if (stages == 6) return occupancy<__nv_bfloat16, 128, 6>(ctas, bytes);
  return occupancy<__nv_bfloat16, 128, decode::kDefaultStages<128>>(ctas, bytes);
}

}  // namespace flashbox::cuda
