// Which instantiation of the Hopper forward runs a call, per head_dim (the configurations and the
// tile each call gets: tile_policy.hpp; the instantiations themselves: the kernel table,
// scripts/generate_kernels.py, and its files in instantiations/).
//   head_dim 64:  192 x 128 (three consumer warpgroups, FA3's causal tile, the default), 128 x 128
//                 (two), and 192 x 128 with softcap and ALiBi compiled in (MODS: only the default tile).
//   head_dim 96:  128 x 128 with Q in registers; softcap and ALiBi at 72..96 run the 128 kernel's MODS
//                 configuration (tile_policy.hpp, serving_head_dim).
//   head_dim 128: 128 x 128 with Q in registers (the default), 128 x 176 (FA3's non-causal tile), and
//                 the default tile with softcap and ALiBi compiled in (the softcap's tanh fused into
//                 the exponentials, FwdSm90Traits::softcap_fused).
//   head_dim 192: 128 x 112; head_dim 256: 128 x 64. No MODS configuration: the plan declines softcap,
//                 ALiBi and variable-length batches above head_dim 128 (the sm80 family takes them).
//   (head_dim, head_dim_v) = (192, 128): 128 x 128 (tile_policy.hpp's kDvKernels).
//   The mask families (MaskExtConfig): head_dim 64 and 128 at 128 x 128, bf16 (tile_policy.hpp,
//   mask_kernel_head_dim).
#include "cuda/forward/sm90/flash_fwd_sm90_instances.hpp"
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"

namespace flashbox::sm90 {

// One element type of a row: the row's traits constant (the kernel table's names, generated into
// flash_fwd_sm90_instances.hpp).
namespace {
template <FwdSm90Traits V>
cudaError_t launch_row(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_config<FwdConfig<__nv_bfloat16, V>>(p, grid, stream)
              : launch_config<FwdConfig<__half, V>>(p, grid, stream);
}
}  // namespace

cudaError_t launch_fwd_d64(bool bf16, TileChoice tile, bool mods, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  if (mods) return launch_row<kFwdD64_192x128_Mods>(bf16, p, grid, stream);
  if (tile.bm == 192) return launch_row<kFwdD64_192x128>(bf16, p, grid, stream);
  return launch_row<kFwdD64_128x128>(bf16, p, grid, stream);
}

cudaError_t launch_fwd_d96(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  return launch_row<kFwdD96_128x128>(bf16, p, grid, stream);
}

cudaError_t launch_fwd_d128(bool bf16, TileChoice tile, bool mods, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  if (mods) return launch_row<kFwdD128_128x128_Mods>(bf16, p, grid, stream);
  if (tile.bn == 176) return launch_row<kFwdD128_128x176>(bf16, p, grid, stream);
  return launch_row<kFwdD128_128x128>(bf16, p, grid, stream);
}

cudaError_t launch_fwd_d192(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  return launch_row<kFwdD192_128x112>(bf16, p, grid, stream);
}

cudaError_t launch_fwd_dv(bool bf16, int d, int dv, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  if (d == 192 && dv == 128) return launch_row<kFwdD192_Dv128_128x128>(bf16, p, grid, stream);
  return cudaErrorInvalidValue;
}

cudaError_t launch_fwd_d256(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  return launch_row<kFwdD256_128x64>(bf16, p, grid, stream);
}

cudaError_t launch_fwd_masks(int d, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  if (d == 64) return launch_config<MaskExtConfig<FwdConfig<__nv_bfloat16, kFwdD64_128x128_Masks>>>(p, grid, stream);
  if (d == 128) return launch_config<MaskExtConfig<FwdConfig<__nv_bfloat16, kFwdD128_128x128_Masks>>>(p, grid, stream);
  return cudaErrorInvalidValue;
}

}  // namespace flashbox::sm90
