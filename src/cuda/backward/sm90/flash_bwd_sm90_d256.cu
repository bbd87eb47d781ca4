// The head_dim-256 instantiations of the Hopper backward (64 keys x 64 query rows per step, the two
// consumers splitting dK/dV's columns: flash_bwd_sm90_kernel.cuh, "Head dimension 256"). They also
// serve head dims 200..248 (multiples of 8): the TMA reads zeros past head_dim, the stores stop there
// (136..192 run the d192 instantiations, flash_bwd_sm90_d192.cu).
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_d256(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  return bf16 ? launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 256, .block_m = 64}>>(p, grid, stream, pdl)
              : launch_config<BwdConfig<__half, BwdSm90Traits{.head_dim = 256, .block_m = 64}>>(p, grid, stream, pdl);
}

}  // namespace flashbox::sm90::bwd
