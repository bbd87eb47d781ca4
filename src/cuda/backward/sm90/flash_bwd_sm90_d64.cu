// The head_dim-64 instantiations of the Hopper backward (128 query rows per step).
#include "cuda/backward/sm90/flash_bwd_sm90_config_launch.cuh"

namespace flashbox::sm90::bwd {

cudaError_t launch_bwd_d64(bool bf16, bool capsel, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl) {
  if (capsel)  // softcap calls (BwdConfig::CAPSEL)
    return bf16 ? launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 64, .block_m = 128, .softcap_select = true}>>(p, grid, stream, pdl)
                : launch_config<BwdConfig<__half, BwdSm90Traits{.head_dim = 64, .block_m = 128, .softcap_select = true}>>(p, grid, stream, pdl);
  return bf16 ? launch_config<BwdConfig<__nv_bfloat16, BwdSm90Traits{.head_dim = 64, .block_m = 128}>>(p, grid, stream, pdl)
              : launch_config<BwdConfig<__half, BwdSm90Traits{.head_dim = 64, .block_m = 128}>>(p, grid, stream, pdl);
}

}  // namespace flashbox::sm90::bwd
