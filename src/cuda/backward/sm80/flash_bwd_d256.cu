// Backward kernels for head_dim 256 (see flash_bwd_launch.cuh).
#include "cuda/backward/sm80/flash_bwd_launch.cuh"

namespace flashbox::cuda::bwd {

template <>
cudaError_t launch_flash_bwd<256>(const BwdParams &p, bool bf16, bool deterministic, int block_q, cudaStream_t stream) {
  return launch_flash_bwd_impl<256>(p, bf16, deterministic, block_q, stream);
}

}  // namespace flashbox::cuda::bwd
