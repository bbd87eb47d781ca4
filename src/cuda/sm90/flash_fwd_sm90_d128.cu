// head_dim 128 instantiations: 128 x 128, two consumer warpgroups (FA3's causal tile).
#include "cuda/sm90/flash_fwd_sm90_launch.hpp"

namespace flashbox::sm90 {

cudaError_t launch_fwd_d128(bool bf16, TileChoice, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 128, 128, 2, 2>>(p, grid, stream)
              : launch_config<FwdConfig<__half, 128, 128, 2, 2>>(p, grid, stream);
}

}  // namespace flashbox::sm90
