// head_dim 128 instantiations, two consumer warpgroups: 128 x 128 (the default, causal or not; Q kept
// in registers, measured faster than reading it from shared memory at every K block), the same tile
// with softcap and ALiBi compiled in (MODS: only the default tile has it; docs/design.md §5; with the
// softcap's tanh fused into the exponentials, FwdConfig's CAP_FUSED), and
// 128 x 176 (FA3's non-causal tile; options.sm90_tile / FLASHBOX_SM90_TILE=128x176). tile_policy.hpp
// says why.
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"

namespace flashbox::sm90 {

cudaError_t launch_fwd_d128(bool bf16, TileChoice tile, bool mods, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  constexpr bool qreg = q_in_registers(128, 128);
  if (mods)
    return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 128, 128, 2, 2, qreg, true, true>>(p, grid, stream)
                : launch_config<FwdConfig<__half, 128, 128, 2, 2, qreg, true, true>>(p, grid, stream);
  if (tile.bn == 176)
    return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 128, 176, 2, 2>>(p, grid, stream)
                : launch_config<FwdConfig<__half, 128, 176, 2, 2>>(p, grid, stream);
  return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 128, 128, 2, 2, qreg>>(p, grid, stream)
              : launch_config<FwdConfig<__half, 128, 128, 2, 2, qreg>>(p, grid, stream);
}

}  // namespace flashbox::sm90
