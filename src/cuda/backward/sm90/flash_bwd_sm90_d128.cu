// The head_dim-128 instantiations of the Hopper backward (64 query rows per step), both on the DQLAG
// schedule (flash_bwd_sm90_kernel.cuh "dQ one step late"): bf16 measured 1.5-2.4 % faster than the
// plain one at T >= 8192 (bench/NOTES.md sm90 backward v17); fp16 followed on 2026-12-02 (the plain
// schedule's fp16 kernel ran 4-6 % behind bf16's DQLAG one in the same process, NOTES "the windows on
// both d128 schedules"; its own A/B: NOTES "(branch stages, 2026-12-02)").
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_d128(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  return bf16 ? launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 128, .block_m = 64, .dq_lag = true}>>(p, grid, stream, pdl)
              : launch_config<BwdConfig<__half, BwdSm90Traits{.head_dim = 128, .block_m = 64, .dq_lag = true}>>(p, grid, stream, pdl);
}

}  // namespace flashbox::sm90::bwd
