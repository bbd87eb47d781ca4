// The head_dim-128 instantiations of the Hopper backward (64 query rows per step).
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_d128(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  return bf16 ? launch_config<BwdConfig<__nv_bfloat16, 128, 64>>(p, grid, stream, pdl)
              : launch_config<BwdConfig<__half, 128, 64>>(p, grid, stream, pdl);
}

}  // namespace flashbox::sm90::bwd
