// The bf16 head_dim-64 and -128 instantiations of the Hopper backward with the dQ chunk one step late
// (Cfg::DQLAG, flash_bwd_sm90_kernel.cuh "dQ one step late"), selected by FLASHBOX_SM90_BWD_DQLAG=1
// for the A/B measurement against the default schedule (flash_bwd_sm90.cu). A file of their own so
// that they build beside the d64 / d128 files and leave those objects unchanged.
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_dqlag(int kernel_d, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  if (kernel_d == 64) return launch_config<BwdConfig<__nv_bfloat16, 64, 128, false, true>>(p, grid, stream, pdl);
  if (kernel_d == 128) return launch_config<BwdConfig<__nv_bfloat16, 128, 64, false, true>>(p, grid, stream, pdl);
  return cudaErrorInvalidValue;
}

}  // namespace flashbox::sm90::bwd
