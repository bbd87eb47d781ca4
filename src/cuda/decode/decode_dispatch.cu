// The decode kernels of each head_dim and dtype (the split kernel at its default ring depth and the
// combine), as decode_api.cpp calls them; the instantiations are the kernel table's
// (scripts/generate_kernels.py, instantiations/decode_d*.cu).
#include "cuda/decode/decode_instances.hpp"
#include "cuda/decode/decode_launch.cuh"

namespace flashbox::cuda {

cudaError_t launch_decode_split_d64(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_split<__nv_bfloat16, 64, decode::kDefaultStages<64>>(p, s)
              : decode::launch_split<__half, 64, decode::kDefaultStages<64>>(p, s);
}
cudaError_t launch_decode_combine_d64(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_combine<__nv_bfloat16, 64>(p, s) : decode::launch_combine<__half, 64>(p, s);
}
cudaError_t decode_split_occupancy_d64(bool bf16, int *ctas, int64_t *bytes) {
  return bf16 ? decode::occupancy<__nv_bfloat16, 64, decode::kDefaultStages<64>>(ctas, bytes)
              : decode::occupancy<__half, 64, decode::kDefaultStages<64>>(ctas, bytes);
}

cudaError_t launch_decode_split_d128(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_split<__nv_bfloat16, 128, decode::kDefaultStages<128>>(p, s)
              : decode::launch_split<__half, 128, decode::kDefaultStages<128>>(p, s);
}
cudaError_t launch_decode_combine_d128(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_combine<__nv_bfloat16, 128>(p, s) : decode::launch_combine<__half, 128>(p, s);
}
cudaError_t decode_split_occupancy_d128(bool bf16, int *ctas, int64_t *bytes) {
  return bf16 ? decode::occupancy<__nv_bfloat16, 128, decode::kDefaultStages<128>>(ctas, bytes)
              : decode::occupancy<__half, 128, decode::kDefaultStages<128>>(ctas, bytes);
}

cudaError_t launch_decode_split_d256(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_split<__nv_bfloat16, 256, decode::kDefaultStages<256>>(p, s)
              : decode::launch_split<__half, 256, decode::kDefaultStages<256>>(p, s);
}
cudaError_t launch_decode_combine_d256(const DecodeParams &p, bool bf16, cudaStream_t s) {
  return bf16 ? decode::launch_combine<__nv_bfloat16, 256>(p, s) : decode::launch_combine<__half, 256>(p, s);
}
cudaError_t decode_split_occupancy_d256(bool bf16, int *ctas, int64_t *bytes) {
  return bf16 ? decode::occupancy<__nv_bfloat16, 256, decode::kDefaultStages<256>>(ctas, bytes)
              : decode::occupancy<__half, 256, decode::kDefaultStages<256>>(ctas, bytes);
}

}  // namespace flashbox::cuda
