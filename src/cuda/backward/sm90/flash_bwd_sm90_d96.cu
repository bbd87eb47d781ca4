// The head_dim-96 instantiations of the Hopper backward (64 query rows per step; all tiles in 32-column
// 64B-swizzled panels, dQ as a 64- and a 32-column chunk: flash_bwd_sm90_kernel.cuh, "Head dimension
// 96"). They serve head dims 72..96 (multiples of 8, fixed length), which would otherwise do d128's
// work: the TMA reads zeros past head_dim, the stores stop there. bench/NOTES.md (sm90 forward,
// "d96") has the count.
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_d96(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  return bf16 ? launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 96, .block_m = 64}>>(p, grid, stream, pdl)
              : launch_config<BwdConfig<__half, BwdSm90Traits{.head_dim = 96, .block_m = 64}>>(p, grid, stream, pdl);
}

}  // namespace flashbox::sm90::bwd
