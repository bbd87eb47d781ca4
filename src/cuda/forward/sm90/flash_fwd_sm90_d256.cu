// head_dim 256 instantiations: 128 x 64, two consumer warpgroups, one per dtype (tile_policy.hpp says
// why this tile; docs/design.md §5 why no other). No MODS configuration: softcap and ALiBi at
// head_dim 256 are declined by the plan.
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"

namespace flashbox::sm90 {

cudaError_t launch_fwd_d256(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 256, 64, 2, 2>>(p, grid, stream)
              : launch_config<FwdConfig<__half, 256, 64, 2, 2>>(p, grid, stream);
}

}  // namespace flashbox::sm90
