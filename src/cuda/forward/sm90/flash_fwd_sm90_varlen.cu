// The tile list of a variable-length batch for the Hopper forward, built on the device.
//
// Why on the device: cu_seqlens live in device memory (the C API, like FlashAttention-2, does not
// copy them to the host), so a host-built list would cost a device-to-host copy and a
// synchronisation per call, and could not be captured in a CUDA graph. One small kernel (one CTA of
// 1024 threads) on the call's stream instead writes the list to the call's scratch memory; the
// forward launched after it reads it.
//
// What it writes: one tile (sequence, m_block, head) per query block of every sequence and head, no
// padding (sum over sequences of ceil(seqlen_q / BM) blocks, at most total_q / BM + batch, times
// heads_q), ordered by the block's work, the K/V blocks it visits (block_range with the sequence's
// own lengths and the call's window), longest first: the persistent grid's snake then deals the long
// tiles first and ends on the short ones (longest processing time first), across sequences, whatever
// order the caller packed them in; inside a level, head by head. A counting sort over work levels
// (0 .. kLevels - 1 blocks; longer ones share the last level): a histogram, its scan, a scatter. The
// order of the blocks within a level is the atomics' (not deterministic; the outputs are: every tile
// is computed the same way wherever it runs). A tile is int2 {sequence, m_block * heads_q + head};
// tile_count is the number written.
//
// Malformed prefix sums are clamped by varlen_span like everywhere else; a batch whose blocks exceed
// max_entries (only a malformed one) gets no tile at all, so nothing is written past the list.
#include <cuda_runtime.h>

#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"

namespace flashbox::sm90 {
namespace {

constexpr int kListThreads = 1024;
constexpr int kLevels = 2 * kListThreads;  // two levels per thread in the scan

// Index of a block's level in the list: descending work = ascending index.
__device__ __forceinline__ int level_of(const VarlenListArgs &a, int m_block, int sq, int sk) {
  const int work = block_range(a.mods, m_block, a.bm, a.bn, sq, sk).count();
  return kLevels - 1 - min(work, kLevels - 1);
}

// Every (sequence, m_block): a warp per sequence, its lanes over the sequence's query blocks (long
// and short sequences both spread over the threads).
template <class F>
__device__ __forceinline__ void for_each_block(const VarlenListArgs &a, F &&f) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int b = warp; b < a.batch; b += kListThreads / 32) {
    const cuda::VarlenSpan s = cuda::varlen_span(a.cu_q, a.cu_k, b, a.total_q, a.total_k, a.max_q, a.max_k);
    const int num_m = (s.seqlen_q + a.bm - 1) / a.bm;
    for (int m = lane; m < num_m; m += 32) f(b, m, level_of(a, m, s.seqlen_q, s.seqlen_k));
  }
}

__global__ void __launch_bounds__(kListThreads) varlen_tile_list_kernel(const VarlenListArgs a) {
  __shared__ unsigned level[kLevels];  // the histogram, then each level's next free slot
  __shared__ unsigned size[kLevels];   // the histogram, kept
  __shared__ unsigned begin[kLevels];  // each level's first slot
  __shared__ unsigned warp_total[kListThreads / 32];
  __shared__ unsigned total;
  for (int i = int(threadIdx.x); i < kLevels; i += kListThreads) level[i] = 0;
  __syncthreads();
  for_each_block(a, [&](int, int, int lvl) { atomicAdd(&level[lvl], 1u); });
  __syncthreads();
  for (int i = int(threadIdx.x); i < kLevels; i += kListThreads) size[i] = level[i];

  // Exclusive scan of the histogram: thread t owns levels 2t and 2t + 1.
  const int t = int(threadIdx.x), lane = t % 32, warp = t / 32;
  const unsigned v0 = level[2 * t], v1 = level[2 * t + 1];
  unsigned incl = v0 + v1;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const unsigned up = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += up;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const unsigned w = warp_total[lane];
    unsigned wincl = w;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const unsigned up = __shfl_up_sync(0xffffffffu, wincl, off);
      if (lane >= off) wincl += up;
    }
    warp_total[lane] = wincl - w;  // exclusive
    if (lane == 31) total = wincl;
  }
  __syncthreads();
  const unsigned excl = incl - (v0 + v1) + warp_total[warp];
  level[2 * t] = begin[2 * t] = excl;
  level[2 * t + 1] = begin[2 * t + 1] = excl + v0;
  __syncthreads();

  // Inside a level the tiles go head by head (tile = H * level start + h * level size + the entry's
  // rank in the level), so that the CTAs in flight on a level of many equal entries (a long
  // non-causal sequence) share a few heads' K/V in L2, as the fixed-length order's one head per
  // section does. A malformed batch with more entries than max_entries writes no tile at all.
  const bool fits = total <= unsigned(a.max_entries);
  if (fits)
    for_each_block(a, [&](int b, int m, int lvl) {
      const unsigned rank = atomicAdd(&level[lvl], 1u) - begin[lvl];
      for (int h = 0; h < a.heads_q; ++h)
        a.entries[size_t(begin[lvl]) * a.heads_q + size_t(h) * size[lvl] + rank] = make_int2(b, m * a.heads_q + h);
    });
  if (threadIdx.x == 0) *a.tile_count = fits ? int(total) * a.heads_q : 0;
}

}  // namespace

cudaError_t launch_varlen_tile_list(const VarlenListArgs &a, cudaStream_t stream) {
  varlen_tile_list_kernel<<<1, kListThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace flashbox::sm90
