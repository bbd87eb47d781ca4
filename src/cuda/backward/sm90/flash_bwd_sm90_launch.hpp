// The Hopper backward's launch of one compile-time configuration (plan_sm90_backward in
// flash_bwd_sm90.cu calls it). The kernel instantiations are split by head_dim
// (flash_bwd_sm90_d32.cu, _d64.cu, _d96.cu, _d128.cu, _d192.cu, _d256.cu, _qdesc.cu: the deterministic-only bf16
// d64/d128 instantiations with v10's order, and _dqpair.cu: the deterministic-only bf16 d64 one with
// v9's order and two dQ writers, det_walk.hpp) so they build in parallel. pdl: launch with
// programmatic stream serialization (the kernel waits for the prepare kernel itself).
#pragma once
#include <cuda_runtime.h>

namespace flashbox::sm90::bwd {

struct BwdSm90Params;

cudaError_t launch_bwd_d32(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl);
// capsel: the softcap instantiation (BwdConfig::CAPSEL), for softcap calls.
cudaError_t launch_bwd_d64(bool bf16, bool capsel, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl);
cudaError_t launch_bwd_d96(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl);
cudaError_t launch_bwd_d128(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl);
cudaError_t launch_bwd_d192(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl);
cudaError_t launch_bwd_d256(bool bf16, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl);
// bf16, kernel_d 64 or 128 (else cudaErrorInvalidValue); p.dq_sem set, fixed length.
cudaError_t launch_bwd_qdesc(int kernel_d, const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl);
// bf16 head_dim 64, p.dq_sem set, no softcap (Cfg::DQPAIR); fixed length or varlen.
cudaError_t launch_bwd_dqpair(const BwdSm90Params &p, dim3 grid, cudaStream_t stream, bool pdl);

}  // namespace flashbox::sm90::bwd
