// The sm90 fp8 forward's V^T pre-pass (flash_fwd_sm90_fp8_vt.hpp; why a pre-pass:
// flash_fwd_sm90_fp8_kernel.cuh's opening comment).
#include "cuda/forward/sm90/flash_fwd_sm90_fp8_vt.hpp"

#include "cuda/forward/sm90/flash_fwd_sm90_fp8_kernel.cuh"
#include "cuda/hopper/grid_dependency.cuh"

namespace flashbox::sm90::fp8 {

// V [batch, seqlen_k, heads_kv, head_dim] (e4m3, strides in elements) -> V^T [batch, heads_kv,
// head_dim, keys_pad] with key_of_position's order inside every 16 keys and zeros past seqlen_k (P is
// 0 there, and 0 * a stale NaN byte would not be). One block: 64 keys x 64 columns through shared
// memory, 4-byte loads along head_dim and 4-byte stores along the keys.
__global__ void __launch_bounds__(256) transpose_v_kernel(const TransposeVArgs a) {
  // The forward kernel may be scheduled as soon as every block got here (it waits for this grid's
  // completion before it reads V^T): its CTAs start on the SMs this grid's last wave leaves.
  grid_dependents_launch();
  __shared__ uint8_t tile[64][64 + 4];
  const int key0 = blockIdx.x * 64, col0 = blockIdx.y * 64;
  const int g = blockIdx.z % a.heads_kv, b = blockIdx.z / a.heads_kv;
  for (int i = threadIdx.x; i < 64 * 16; i += 256) {
    const int r = i / 16, c = 4 * (i % 16);
    const int key = key0 + r, col = col0 + c;
    uint32_t w = 0;
    if (key < a.seqlen_k && col < a.head_dim)  // head_dim is a multiple of 16: whole words
      w = *reinterpret_cast<const uint32_t *>(a.v + b * a.v_batch + int64_t(key) * a.v_seq + g * a.v_head + col);
#pragma unroll
    for (int e = 0; e < 4; ++e) tile[r][c + e] = uint8_t(w >> (8 * e));
  }
  __syncthreads();
  uint8_t *out = a.vt + (int64_t(b) * a.heads_kv + g) * a.head_dim * a.keys_pad;
  for (int i = threadIdx.x; i < 64 * 16; i += 256) {
    const int d = i / 16, pos = 4 * (i % 16);
    if (col0 + d >= a.head_dim || key0 + pos >= a.keys_pad) continue;
    uint32_t w = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int q = pos + e;
      w |= uint32_t(tile[(q & ~15) + key_of_position(q & 15)][d]) << (8 * e);
    }
    *reinterpret_cast<uint32_t *>(out + int64_t(col0 + d) * a.keys_pad + key0 + pos) = w;
  }
}


cudaError_t launch_transpose_v(const TransposeVArgs &a, cudaStream_t stream) {
  const dim3 grid(unsigned(a.keys_pad / 64), unsigned((a.head_dim + 63) / 64), unsigned(a.batch_heads));
  transpose_v_kernel<<<grid, 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace flashbox::sm90::fp8
