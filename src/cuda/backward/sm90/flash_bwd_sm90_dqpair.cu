// The deterministic-only instantiation of the Hopper backward with v9's order and two dQ writers
// (Cfg::DQPAIR, flash_bwd_sm90_kernel.cuh "Deterministic mode"; the choice: det_walk.hpp): bf16 at
// head_dim 64, the calls outside v10's order and without softcap. A file of its own so that it
// builds beside the d64 file.
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_dqpair(const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  return launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 64, .block_m = 128, .two_dq_writers = true}>>(p, grid, stream, pdl);
}

}  // namespace flashbox::sm90::bwd
