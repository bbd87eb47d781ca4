// head_dim 64 instantiations: 128 x 128 (two consumer warpgroups) and 192 x 128 (three, FA3's causal
// tile, the default), plus 192 x 128 with softcap and ALiBi compiled in (MODS: only the default tile
// has it; tile_policy.hpp, docs/design.md §5).
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"

namespace flashbox::sm90 {

cudaError_t launch_fwd_d64(bool bf16, TileChoice tile, bool mods, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  if (mods)
    return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 64, 128, 3, 2, false, true>>(p, grid, stream)
                : launch_config<FwdConfig<__half, 64, 128, 3, 2, false, true>>(p, grid, stream);
  if (tile.bm == 192)
    return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 64, 128, 3, 2>>(p, grid, stream)
                : launch_config<FwdConfig<__half, 64, 128, 3, 2>>(p, grid, stream);
  return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 64, 128, 2, 2>>(p, grid, stream)
              : launch_config<FwdConfig<__half, 64, 128, 2, 2>>(p, grid, stream);
}

}  // namespace flashbox::sm90
