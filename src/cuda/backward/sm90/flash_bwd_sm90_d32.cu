// The head_dim-32 instantiations of the Hopper backward (128 query rows per step; all tiles in one
// 32-column 64B-swizzled panel, dV/dK as m64n32 products, dQ as two 64 x 64 chunks of which columns
// 32..63 are zeros: flash_bwd_sm90_kernel.cuh, "Head dimension 32"). They serve head dims 8..32
// (multiples of 8, fixed length and varlen), which would otherwise do d64's work: the TMA reads
// zeros past head_dim, the stores stop there. bench/NOTES.md (sm90 backward, "a head_dim 32
// backward") has the count and the measurement.
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_d32(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  return bf16 ? launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 32, .block_m = 128}>>(p, grid, stream, pdl)
              : launch_config<BwdConfig<__half, BwdSm90Traits{.head_dim = 32, .block_m = 128}>>(p, grid, stream, pdl);
}

}  // namespace flashbox::sm90::bwd
