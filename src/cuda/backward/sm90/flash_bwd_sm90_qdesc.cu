// The deterministic-only instantiations of the Hopper backward with v10's order and walk
// (Cfg::QDESC, flash_bwd_sm90_kernel.cuh "Deterministic mode"; the choice: det_walk.hpp): bf16 at
// head_dim 64 and 128. A file of their own so that they build beside the d64 / d128 files.
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_qdesc(int kernel_d, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  if (kernel_d == 64) return launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 64, .block_m = 128, .ascending_order = true, .two_dq_writers = true}>>(p, grid, stream, pdl);
  if (kernel_d == 128) return launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 128, .block_m = 64, .ascending_order = true, .two_dq_writers = true}>>(p, grid, stream, pdl);
  return cudaErrorInvalidValue;
}

}  // namespace flashbox::sm90::bwd
