// The Hopper backward's instantiations that add dQ from the consumers' registers (Cfg::DQRED,
// flash_bwd_sm90_kernel.cuh "dQ from registers"; branch dqred, 2026-12-02): bf16 head_dim 64 (the
// plain schedule) and 128 (DQLAG; with ds_bufs 3 three dS^T buffers), non-deterministic calls only, launched where the plan picks
// them (flash_bwd_sm90.cu, uses_dqred). A file of their own so that they build beside the d64 /
// d128 files, whose kernels stay byte-identical.
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_dqred(int kernel_d, int ds_bufs, const BwdSm90Params &p, dim3 grid, cudaStream_t stream,
                             bool pdl) {
  if (kernel_d == 64) return launch_config<BwdConfig<__nv_bfloat16, 64, 128, false, false, true>>(p, grid, stream, pdl);
  if (kernel_d == 128 && ds_bufs == 3)
    return launch_config<BwdConfig<__nv_bfloat16, 128, 64, false, true, true, 3>>(p, grid, stream, pdl);
  if (kernel_d == 128) return launch_config<BwdConfig<__nv_bfloat16, 128, 64, false, true, true>>(p, grid, stream, pdl);
  return cudaErrorInvalidValue;
}

}  // namespace flashbox::sm90::bwd
