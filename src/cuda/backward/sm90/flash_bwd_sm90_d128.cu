// The head_dim-128 instantiations of the Hopper backward (64 query rows per step). bf16 runs the
// DQLAG schedule (flash_bwd_sm90_kernel.cuh "dQ one step late"; measured 1.5-2.4 % faster than the
// plain one at T >= 8192, bench/NOTES.md sm90 backward v17); fp16 keeps the plain schedule (not
// measured with DQLAG).
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_d128(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  return bf16 ? launch_config<BwdConfig<__nv_bfloat16, 128, 64, false, true>>(p, grid, stream, pdl)
              : launch_config<BwdConfig<__half, 128, 64>>(p, grid, stream, pdl);
}

}  // namespace flashbox::sm90::bwd
