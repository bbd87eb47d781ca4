// The head_dim-192 instantiations of the Hopper backward (64 keys x 64 query rows per step, consumer
// 0 accumulating dV and consumer 1 dK over all 192 columns, a three-deep Q/dO ring:
// flash_bwd_sm90_kernel.cuh, "Head dimension 192"). They also serve head dims 136..184 (multiples of
// 8): the TMA reads zeros past head_dim, the stores stop there. They exist because 136..192 on the
// d256 kernel did a third more work than needed (docs/design.md §5).
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_d192(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  return bf16 ? launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 192, .block_m = 64}>>(p, grid, stream, pdl)
              : launch_config<BwdConfig<__half, BwdSm90Traits{.head_dim = 192, .block_m = 64}>>(p, grid, stream, pdl);
}

}  // namespace flashbox::sm90::bwd
