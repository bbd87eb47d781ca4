// head_dim 192 instantiations: 128 x 112, two consumer warpgroups, one per dtype; they serve head_dims
// 136..192 (tile_policy.hpp: 112 keys is what the shared memory allows, docs/design.md §5 why no other).
// No MODS or varlen configuration: softcap, ALiBi and variable-length batches above head_dim 128 are
// declined by the plan (the sm80 family takes them), as at 256.
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"

namespace flashbox::sm90 {

cudaError_t launch_fwd_d192(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 192, 112, 2, 2>>(p, grid, stream)
              : launch_config<FwdConfig<__half, 192, 112, 2, 2>>(p, grid, stream);
}

}  // namespace flashbox::sm90
