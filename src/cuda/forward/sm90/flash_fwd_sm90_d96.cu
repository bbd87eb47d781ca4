// head_dim 96 instantiations: 128 x 128, two consumer warpgroups, Q in registers, one per dtype; they
// serve head_dims 72..96, which ran on the 128 kernel with a third more tensor-core work (S = Q K^T
// over 128 columns, O += P V into 128). The design is the 128 kernel's (flash_fwd_sm90_kernel.cuh),
// with the products stopped at 96: Q and K keep two 64-column 128B-swizzled panels (the TMA's zero
// fill past head_dim; S = Q K^T is 6 k-steps, not 8), and V is three 32-column 64B-swizzled panels
// so that O += P V is one N = 96 product per k-step (an N-major operand cannot end inside a 128B
// swizzle atom of 64 columns). Registers per consumer thread: O 48 + S 64 + P 32 + Q 24 (the 128
// kernel: 64 + 64 + 32 + 32). No MODS configuration: softcap and ALiBi at 72..96 run the 128
// kernel's (tile_policy.hpp, serving_head_dim). bench/NOTES.md (sm90 forward, "d96") has the count.
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"

namespace flashbox::sm90 {

cudaError_t launch_fwd_d96(bool bf16, const FwdParams &p, dim3 grid, cudaStream_t stream) {
  constexpr bool qreg = q_in_registers(96, 128);
  return bf16 ? launch_config<FwdConfig<__nv_bfloat16, 96, 128, 2, 2, qreg>>(p, grid, stream)
              : launch_config<FwdConfig<__half, 96, 128, 2, 2, qreg>>(p, grid, stream);
}

}  // namespace flashbox::sm90
