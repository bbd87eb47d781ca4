// Host side of the Hopper backward family: its plan (when it applies, tensor maps, scratch sizes), the
// launch chain ([varlen tile list], prepare, main, convert, [sink_grad]: run, below; the main and
// convert kernels with programmatic dependent launch, flash_bwd_sm90_kernel.cuh "Programmatic
// dependent launch"), and the memory-bound kernels around the main one (prepare and the mask
// families' pre-passes in files of their own: flash_bwd_sm90_prepare.cu, flash_bwd_sm90_mask_walks.cu):
//   prepare:    per (batch, query head, padded row): D = rowsum(dO ∘ O) (over head_dim_v: O's and dO's
//               columns, which differ from head_dim for the (192, 128) kernel) and LSE · log2 e; padding
//               rows (>= seqlen_q, up to a whole query tile) get D = 0 and LSE = +inf, so P = 0.
//               It also zeroes the row's share of the dQ accumulator (kernel_d floats of the flat
//               buffer: the instantiation's row width, accum_d_for in bwd_route.hpp, e.g. 64 for head
//               dims 8..64 (the d32 and d64 kernels), 128 for 72..128, 192 for 136..192) and of the
//               deterministic mode's semaphores (one int per row while any are left): no separate memset launch.
//   sink_grad:  with a learnable sink, dsink from prepare's D and the forward's LSE (after the
//               chain; cuda/backward/sink_grad.hpp, shared with the sm80 family).
//   convert_dq: dq = scale · dq_accum, read in the main kernel's fragment order (see
//               bwd_sm90_consumer.cuh), written in the dtype through the caller's strides.
//               Fixed length at head_dim <= 128 (the configurations with a dQ writer warp):
//               convert_dq_early_kernel, which converts each query block as soon as its adds
//               completed (per-block counters), while the main kernel still runs; else (varlen,
//               head_dim > 128) after the main grid completed.
// Variable-length batches (cu_seqlens; the d32, d64, d96 and d128 instantiations, head dims 8..128): the
// same kernels over the packed layout. prepare sees the packed query tokens as one batch entry
// ([heads_q, total_q + batch * BM] rows: the tokens, then padding rows, so that a sequence's last
// query block never reads past the vectors, and room for the accumulator's per-sequence offsets);
// convert_dq_varlen walks the packed rows, finds each row's sequence b by binary search in
// cu_seqlens_q and reads the row's head_dim columns from its query block's accumulator (rows of
// kernel_d floats, the instantiation's width), which starts at row q0 + b * BM + m * BM (the main
// kernel's accum_row: blocks of different sequences never overlap; the accumulator costs batch * BM
// rows per head more than the tokens). The main kernel's tiles
// come from the forward's device-built list (flash_fwd_sm90_varlen.cu) with the roles of queries and
// keys swapped: a key block "sees" the query blocks of m_range exactly as a query block sees key
// blocks with the window mirrored (left <-> right) and seqlen_q <-> seqlen_k, so the list holds one
// entry per (sequence, key block of 128, kv head), longest walk first. Deterministic mode does not
// use the list (its order must put a sequence's later key blocks first, file header of the kernel):
// it takes the fixed-length CTA order over (sequence, kv head) with max_seqlen_k's key blocks, and
// the CTAs past a sequence's keys exit at once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/backends.hpp"
#include "core/error.hpp"
#include "core/softmax_scale.hpp"
#include "cuda/backward/sink_grad.hpp"
#include "cuda/backward/sm80/bwd_device.cuh"
#include "cuda/backward/sm90/bwd_route.hpp"
#include "cuda/backward/sm90/det_walk.hpp"
#include "cuda/backward/sm90/flash_bwd_sm90_kernel.cuh"
#include "cuda/backward/sm90/flash_bwd_sm90_mask_walks.hpp"
#include "cuda/backward/sm90/flash_bwd_sm90_prepare.hpp"
#include "cuda/backward/sm90/flash_bwd_sm90_instances.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/common/launch_attributes.hpp"
#include "cuda/common/mask_ext.cuh"
#include "cuda/common/mask_ext_plan.hpp"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/varlen_span.cuh"
#include "cuda/forward/sm90/flash_fwd_sm90_launch.hpp"
#include "cuda/forward/sm90/tile_policy.hpp"
#include "cuda/hopper/grid_dependency.cuh"
#include "cuda/hopper/tma_host.hpp"

namespace flashbox::sm90::bwd {
namespace {

struct ConvertArgs {
  const float *dq_accum;
  void *dq;
  int64_t dq_stride[3];
  int batch, heads_q, seqlen_q, num_m_blocks, block_m, head_dim, kernel_d;  // columns >= head_dim not written
  float scale;
  // Early convert (convert_dq_early_kernel; null done: the whole-grid wait). done: per query block
  // (index (batch * heads_q + h) * num_m_blocks + m) done_per_block counters, each complete at
  // done_scale times the block's adder count: the writers' completion counter (1 counter, NWG
  // counts per adding key block) or the deterministic semaphores (NWG counters, 1 each).
  const int *done;
  int *next;  // the early convert's work counter (zeroed, after the completion counters)
  int done_per_block;
  int done_scale;  // counts per adding key block: NWG (the writer's counter, one per chunk), 1 (semaphores)
  int seqlen_k, block_n, group;  // adders_of's shape (fixed length)
  int chunk_q_heads;             // query heads per chunk of the main grid's order: chunk_heads * group
  int m_desc;                    // the main kernel walks query blocks descending (the ascending order)
  cuda::DeviceMods mods;         // the main kernel's (m_range)
};

// Element (row r, column c) of a 64 x 64 dQ chunk sits in register i of thread t of the warpgroup
// that computed it (docs/hopper.md §2.6) and was staged at float (i / 4 * 128 + t) * 4 + i % 4:
// float4 j of thread t holds rows r0 = (t / 32) * 16 + (t % 32) / 4 and r0 + 8, columns
// 8 j + 2 (t % 4) and the next. One thread per (chunk, t): 8 float4 loads, each a contiguous 512 bytes
// across the warp (one thread per element pair, 8-byte loads at a 16-byte stride, ran at 2.5x cuDNN's
// time), then 2 x 8 pairs stored through the caller's strides.
// Convert one (chunk, t) of query block m of row bh = batch * heads_q + h: the 8 float4 of thread t's registers,
// scaled, stored as the dtype through the caller's strides (rows < seqlen_q, columns < head_dim).
template <typename Elem>
__device__ __forceinline__ void convert_chunk(const ConvertArgs &a, int64_t bh, int m, int chunk, int t) {
  using Tr = cuda::ElementTraits<Elem>;
  const int nd = a.kernel_d / 64, nch = a.block_m / 64 * nd;
  const int64_t chunk_id = (bh * a.num_m_blocks + m) * nch + chunk;
  const int h = int(bh % a.heads_q), b = int(bh / a.heads_q);
  const int row0 = m * a.block_m + (chunk / nd) * 64 + (t / 32) * 16 + (t % 32) / 4;
  const float4 *src = reinterpret_cast<const float4 *>(a.dq_accum) + chunk_id * 1024 + t;
  float4 v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = src[j * 128];
  const int col0 = (chunk % nd) * 64;
  if (col0 >= a.head_dim) return;                      // a chunk wholly past head_dim (the d256 kernel below 193)
  const int groups = min(8, (a.head_dim - col0) / 8);  // 8-column groups inside head_dim
  Elem *base = static_cast<Elem *>(a.dq) + b * a.dq_stride[0] + h * a.dq_stride[2] + col0 + 2 * (t % 4);
  if (row0 < a.seqlen_q) {
    Elem *dst = base + int64_t(row0) * a.dq_stride[1];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < groups) *reinterpret_cast<uint32_t *>(dst + 8 * j) = Tr::pack(v[j].x * a.scale, v[j].y * a.scale);
  }
  if (row0 + 8 < a.seqlen_q) {
    Elem *dst = base + int64_t(row0 + 8) * a.dq_stride[1];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < groups) *reinterpret_cast<uint32_t *>(dst + 8 * j) = Tr::pack(v[j].z * a.scale, v[j].w * a.scale);
  }
}

// Early convert (a.done set: fixed length, head_dim <= 128, the dQ writer's
// configurations). Each query block is converted as soon as every add into it has completed, while
// the main kernel still runs, instead of after its whole grid:
//   target: adders_of (bwd_sm90_tile_order.cuh), the key blocks whose m_range holds m: the same
//     function that bounds the main kernel's walks, so both agree under every mask and window
//     (bench/sm90_bwd_det_order_model.py, check 7: the writer steps on each block are that many).
//   poll: warp 0, lanes < done_per_block, ld.acquire.gpu on the block's counter(s) with __nanosleep
//     backoff until they reach the target, then the CTA's barrier. The writer released each count
//     after the step's bulk reduce-adds completed and a fence.proxy.async (the async proxy's writes
//     ordered before the generic release), so the acquire makes the whole block's sums visible; the
//     deterministic semaphores are counted the same way (one per consumer warpgroup, NWG lanes).
//   work: a fixed number of CTAs (3 per SM, resident together) take blocks from a counter (next,
//     after the completion counters, zeroed by prepare) one at a time, lane 0 taking the next one
//     while the CTA waits for and converts the current one. Not one CTA per block: every thread of
//     convert waits for the main grid before exiting (below), so a CTA per block would hold its
//     slot until the main kernel ended once it had converted its block, and only the first few
//     blocks per free SM could be converted early.
//   order: the blocks in the order they complete (convert_block_at), so that the first ones taken
//     are done: the main grid's chunks first (chunk_heads (batch, kv head) pairs, chunk_q_heads query
//     heads), inside a chunk the group's heads one by one (a CTA walks them head by head), then the
//     query blocks ascending (descending in the ascending order's walk), the chunk's kv heads innermost (they run
//     side by side). Causal, block m's last adder is key block ~m * BM / BN, which reaches it in its
//     first steps, and key block 0 reaches it at step m: low blocks complete first.
//   no deadlock: convert CTAs are dispatched only after every main CTA executed launch_dependents
//     (programmatic launch), i.e. once every main CTA is resident or done; main CTAs never wait for
//     convert (non-deterministic: for nothing; deterministic: only for main CTAs before them, the
//     kernel header's proof), so every adder finishes and every count reaches its target, and a
//     convert CTA waiting for one block holds no block another one needs.
//   stale counts: main executes launch_dependents only after prepare completed (kernel header), so
//     the counters' zeroing is done and flushed before any poll here.
//   exit: every thread still executes griddepcontrol.wait before it exits, so this grid's completion
//     implies the main kernel's (the scratch is freed stream-ordered after this kernel, and the next
//     work in the stream sees every main write), as before.
// A poll gives up after ~2^22 rounds (about a second): a wrong count would otherwise hang the device.
// Giving up is not a wrong answer: the CTA then falls back to the whole-grid wait (griddepcontrol.wait
// in every thread, as convert_dq_kernel does) for that block and every later one, so its sums are final.
// Its own kernel (two small instantiations, bf16 and fp16): as a run-time branch of convert_dq_kernel
// it raised that kernel's registers from 58 to 66 (ptxas), for the paths that keep the whole-grid
// wait (varlen, head_dim > 128).
constexpr int kEarlyConvertCtasPerSm = 3;  // 4 (64 registers) spilled 12 bytes

// Block `blk` of the early convert's order (above): its row bh = batch * heads_q + h and query block m.
__device__ __forceinline__ int2 convert_block_at(const ConvertArgs &a, int blk) {
  const int bhq = a.batch * a.heads_q, mb = a.num_m_blocks;
  const int per_chunk = a.chunk_q_heads * mb;
  const int c = blk / per_chunk;
  int r = blk - c * per_chunk;
  const int pairs = min(a.chunk_q_heads, bhq - c * a.chunk_q_heads) / a.group;  // kv heads in the chunk
  const int hi = r / (mb * pairs);
  r -= hi * mb * pairs;
  const int mi = r / pairs, pair = r - mi * pairs;
  return make_int2((c * (a.chunk_q_heads / a.group) + pair) * a.group + hi, a.m_desc ? mb - 1 - mi : mi);
}

template <typename Elem>
__global__ void __launch_bounds__(256, kEarlyConvertCtasPerSm) convert_dq_early_kernel(const ConvertArgs a) {
  __shared__ int taken[2];  // the block of this iteration and the next one's (lane 0 takes it)
  __shared__ int whole_grid;  // a poll gave up: from then on wait for the whole main grid (above)
  const int mb = a.num_m_blocks, nch = a.block_m / 64 * (a.kernel_d / 64);
  const int blocks = a.batch * a.heads_q * mb;
  if (threadIdx.x == 0) taken[0] = atomicAdd(a.next, 1), whole_grid = 0;
  __syncthreads();
  for (int it = 0;; ++it) {
    const int blk = taken[it & 1];
    if (blk >= blocks) break;  // every thread read the same value after the last barrier
    const int2 bm = convert_block_at(a, blk);
    const int64_t bh = bm.x;
    const int m = bm.y;
    if (threadIdx.x < 32) {
      const int next = threadIdx.x == 0 ? atomicAdd(a.next, 1) : 0;  // its latency overlaps the poll
      // One count per chunk added (the writer's counter: NWG a step; a semaphore: 1 a step).
      const int target = a.done_scale * adders_of(a.mods, m, a.block_m, a.block_n, a.seqlen_q, a.seqlen_k);
      if (int(threadIdx.x) < a.done_per_block) {
        const int *cnt = a.done + (bh * mb + m) * a.done_per_block + threadIdx.x;
        unsigned ns = 32;
        int polls = 0;
        for (; !*static_cast<volatile int *>(&whole_grid) && ld_acquire_gpu(cnt) < target && polls < (1 << 22);
             ++polls) {
          __nanosleep(ns);
          ns = min(2 * ns, 256u);
        }
        if (polls == (1 << 22)) whole_grid = 1;
      }
      if (threadIdx.x == 0) taken[(it + 1) & 1] = next;  // read after the barrier below; taken[it & 1]
      __syncwarp();                                       // is not written before the next one
    }
    __syncthreads();  // warp 0's acquire, then the barrier: the block's sums are visible to the CTA
    if (whole_grid) sm90::grid_dependency_wait();  // after the first, returns at once
    for (int x = int(threadIdx.x); x < nch * 128; x += blockDim.x) convert_chunk<Elem>(a, bh, m, x / 128, x % 128);
  }
  sm90::grid_dependency_wait();  // every thread: this grid's completion implies the main kernel's
}

template <typename Elem>
__global__ void convert_dq_kernel(const ConvertArgs a) {
  // Launched programmatically after the main kernel: the accumulator is complete once it completed
  // (every thread waits, so this grid's completion implies the main kernel's, and prepare's).
  sm90::grid_dependency_wait();
  const int nd = a.kernel_d / 64, nch = a.block_m / 64 * nd;
  const int64_t threads = int64_t(a.batch) * a.heads_q * a.num_m_blocks * nch * 128;
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < threads; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t chunk_id = x / 128;  // (batch * head, query block, chunk)
    const int64_t bm = chunk_id / nch;
    convert_chunk<Elem>(a, bm / a.num_m_blocks, int(bm % a.num_m_blocks), int(chunk_id % nch), int(x % 128));
  }
}

struct ConvertVarlenArgs {
  const float *dq_accum;
  void *dq;
  int64_t dq_stride[3];
  const int32_t *cu_q, *cu_k;
  int batch, heads_q, total_q, total_k, max_q, max_k, rows_pad, block_m;
  int head_dim, kernel_d;  // the call's columns (written), the accumulator's row width (>= head_dim)
  float scale;
};

// Varlen: one thread per (query head, packed row, 64-column panel holding columns < head_dim, column
// quad q): finds the row's sequence (the last b with cu_q[b] <= row; rows no sequence covers are
// left unwritten), its block m and row r in it, and reads the row's 8 column pairs from the block's
// accumulator, laid out as above (chunk (r / 64) * ND + panel, ND = kernel_d / 64; float
// (j * 128 + t) * 4 + 2 * half with t = (r % 64 / 16) * 32 + (r % 8) * 4 + q, half = r % 16 / 8), of
// which it writes the 8-column groups j inside head_dim (below the instantiation's width the others
// are the TMA's zeros' products).
template <typename Elem>
__global__ void convert_dq_varlen_kernel(const ConvertVarlenArgs a) {
  using Tr = cuda::ElementTraits<Elem>;
  const int nd = a.kernel_d / 64, np = (a.head_dim + 63) / 64;  // chunks per query panel; panels written
  const int64_t threads = int64_t(a.heads_q) * a.total_q * np * 4;
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < threads; x += int64_t(gridDim.x) * blockDim.x) {
    const int q = int(x % 4);
    const int panel = int(x / 4 % np);
    const int64_t hr = x / (4 * np);
    const int row = int(hr % a.total_q), h = int(hr / a.total_q);
    int lo = 0, hi = a.batch - 1;  // the last b in [0, batch) with cu_q[b] <= row
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (a.cu_q[mid] <= row) lo = mid; else hi = mid - 1;
    }
    const cuda::VarlenSpan s = cuda::varlen_span(a.cu_q, a.cu_k, lo, a.total_q, a.total_k, a.max_q, a.max_k);
    if (row < s.q0 || row >= s.q0 + s.seqlen_q) continue;
    // The search above reads only cu_seqlens (the call's input) and may overlap the main kernel's
    // tail; the accumulator is read after its completion (repeated waits return at once).
    sm90::grid_dependency_wait();
    const int r_seq = row - s.q0, m = r_seq / a.block_m, r = r_seq - m * a.block_m;
    const int64_t block = int64_t(h) * a.rows_pad + s.q0 + int64_t(lo + m) * a.block_m;  // accum_row
    const int rr = r % 64, t = (rr / 16) * 32 + (rr % 8) * 4 + q, half = rr % 16 / 8;
    const float *src = a.dq_accum + block * a.kernel_d + ((r / 64) * nd + panel) * 4096 + t * 4 + 2 * half;
    Elem *dst = static_cast<Elem *>(a.dq) + int64_t(row) * a.dq_stride[1] + int64_t(h) * a.dq_stride[2] + panel * 64 +
                2 * q;
    const int groups = min(8, (a.head_dim - panel * 64) / 8);  // 8-column groups inside head_dim
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (j >= groups) break;
      const float2 v = *reinterpret_cast<const float2 *>(src + j * 512);
      *reinterpret_cast<uint32_t *>(dst + 8 * j) = Tr::pack(v.x * a.scale, v.y * a.scale);
    }
  }
  sm90::grid_dependency_wait();  // every thread, also one with no row: this grid's completion implies the main kernel's
}

// The instantiation's query and key block sizes (which instantiation serves a head_dim, and its
// accumulator's row width: bwd_route.hpp, kernel_head_dim and accum_d_for).
int block_m_for(int kd) { return kd == 64 || kd == 32 ? 128 : 64; }
int block_n_for(int kd) { return kd > 128 ? 64 : 128; }

// The current device's SM count (132 where it cannot be read).
int sm_count() {
  int sms = 0, dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    sms = 132;
  }
  return sms;
}

// (batch, kv head) pairs per chunk of the CTA order (bwd_sm90_tile_order.cuh, tile_of): enough for
// two CTAs per SM in a chunk, so that the longest-first order inside it leaves no SM idle at the end
// (1 = the plain head-by-head order, where one head alone has that many key blocks); at most 24 MB of
// the chunk's dQ accumulators, which the adds keep in L2 (one query head's per pair: with GQA a pair's
// CTAs add into `group` heads', not counted, see below). Then, of the sizes from that bound g down to
// g / 2, the one whose last chunk is fullest (a divisor of the pairs if there is one, larger first):
// a short last chunk starts its long CTAs late and ends on too few of them to fill the SMs. An even
// split, ceil(pairs / ceil(pairs / g)), is g again when no equal split exists: GQA 32/8 B4 T8192
// (32 pairs, g = 5) would run chunks 5,5,5,5,5,5,2, the last 128 CTAs of 4x the MHA length on 132
// SMs, which the list-scheduling model (bench/sm90_bwd_sched_model.py --gqa) puts at 0.943 of the
// ideal against 0.995 with chunks of 4.
int chunk_heads_for(int64_t num_bh, int64_t num_n_blocks, int64_t seqlen_q_pad, int64_t head_dim) {
  const int sms = sm_count();
  int64_t g = (2 * sms + num_n_blocks - 1) / num_n_blocks;
  if (g <= 3) return 1;
  g = std::min<int64_t>(g, std::max<int64_t>(1, (int64_t(24) << 20) / (seqlen_q_pad * head_dim * 4)));
  g = std::clamp<int64_t>(g, 1, num_bh);
  // The last chunk's fill num_bh % c / c (1 for a divisor), compared as r * best_c > best_r * c.
  int64_t best = g, best_r = num_bh % g == 0 ? g : num_bh % g;
  for (int64_t c = g - 1; c >= (g + 1) / 2 && best_r < best; --c) {
    const int64_t r = num_bh % c == 0 ? c : num_bh % c;
    if (r * best > best_r * c) best = c, best_r = r;
  }
  return int(best);
}

struct Launch {
  BwdSm90Params p;  // tensor maps and sizes; the scratch pointers are set by the run
  PrepArgs prep;
  ConvertArgs conv;
  ConvertVarlenArgs conv_varlen;  // varlen (conv unused)
  bool varlen;
  sm90::VarlenListArgs list;  // varlen, not deterministic: the tile list (list_bytes of scratch)
  int64_t list_bytes;
  int64_t vec_bytes, dq_accum_bytes, sem_bytes, rows, conv_threads;
  bool det;    // deterministic: the sem_bytes are the semaphores (dq_sem)
  bool early;  // early convert (convert_dq_early_kernel); non-deterministic: the sem_bytes are the writer's counters (dq_done)
  dim3 grid;
  bool bf16;
  int kd;      // the instantiation
  int kdv;     // its DV where head_dim_v != head_dim (the pair's own kernel: 128 at kd 192), else 0
  bool qdesc;   // deterministic in the ascending order (det_walk.hpp): the ascending_order instantiation of kd
  bool capsel;  // d64 softcap: the softcap_select instantiation
  bool dqpair;  // deterministic bf16 d64 in the descending order: the two_dq_writers instantiation
  bool masks;   // document ids / prefix-LM lengths / block masks: the mask-family instantiation
  MaskWalkArgs walk;              // masks: the pre-pass (walk_bytes of scratch, after the list)
  int64_t walk_bytes;
  BlockLists blocks;  // block masks (and mask mods): the step lists' pre-passes, after the mask walks' tables
  cuda::bwd::SinkGradArgs sink;  // a learnable sink's gradient (sinks null: none); dsum set by the run
  cudaStream_t stream;
};

// The main kernel's instantiation for the plan's choice (the rows of the kernel table,
// flash_bwd_sm90_instances.hpp): the ascending deterministic order (bf16, d64 and d128), the
// descending one with two dQ writers (bf16 d64), the softcap_select d64 kernel for softcap calls, else
// the head_dim's one configuration (d128: dq_lag).
template <class T>
cudaError_t launch_main(const Launch &l, const BwdSm90Params &p) {
  const dim3 g = l.grid;
  const cudaStream_t s = l.stream;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (l.masks) return launch_config<BwdConfig<T, kBwdD128MasksDqLag>>(p, g, s);
    if (l.qdesc)
      return l.kd == 64    ? launch_config<BwdConfig<T, kBwdD64Ascending>>(p, g, s)
             : l.kd == 128 ? launch_config<BwdConfig<T, kBwdD128Ascending>>(p, g, s)
                           : cudaErrorInvalidValue;
    if (l.dqpair) return launch_config<BwdConfig<T, kBwdD64TwoWriters>>(p, g, s);
  } else if (l.masks) {
    return cudaErrorInvalidValue;  // the mask-family kernel is bf16 only (the route declines fp16)
  }
  switch (l.kd) {
    case 32: return launch_config<BwdConfig<T, kBwdD32>>(p, g, s);
    case 64:
      return l.capsel ? launch_config<BwdConfig<T, kBwdD64SoftcapSelect>>(p, g, s)
                      : launch_config<BwdConfig<T, kBwdD64>>(p, g, s);
    case 96: return launch_config<BwdConfig<T, kBwdD96>>(p, g, s);
    case 128: return launch_config<BwdConfig<T, kBwdD128DqLag>>(p, g, s);
    case 192:
      return l.kdv == 128 ? launch_config<BwdConfig<T, kBwdD192Dv128>>(p, g, s)
             : l.kdv == 0 ? launch_config<BwdConfig<T, kBwdD192>>(p, g, s)
                          : cudaErrorInvalidValue;
    default: return launch_config<BwdConfig<T, kBwdD256>>(p, g, s);
  }
}

std::string cuda_text(cudaError_t e, const char *what) {
  return std::string("sm90 backward: ") + what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

int run(const Launch &l) {
  using detail::fail;
  const cudaStream_t stream = l.stream;
  cuda::DeviceScratch lse_log2(stream), dsum(stream), dq_accum(stream);
  cudaError_t e = lse_log2.allocate(l.vec_bytes);
  if (e == cudaSuccess) e = dsum.allocate(l.vec_bytes);
  // then the semaphores, the list, the mask walks
  const int64_t block_bytes = l.blocks.bytes();
  if (e == cudaSuccess)
    e = dq_accum.allocate(l.dq_accum_bytes + l.sem_bytes + l.list_bytes + l.walk_bytes + block_bytes);
  if (e == cudaErrorMemoryAllocation)
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY, "cuda backward: cannot allocate " +
                                                std::to_string(2 * l.vec_bytes + l.dq_accum_bytes + l.sem_bytes +
                                                               l.list_bytes + l.walk_bytes + block_bytes) +
                                                " bytes of scratch");
  if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "cudaMallocAsync"));

  BwdSm90Params p = l.p;
  p.lse_log2 = lse_log2.as<float>(), p.dsum = dsum.as<float>(), p.dq_accum = dq_accum.as<float>();
  int *sem = l.sem_bytes > 0 ? reinterpret_cast<int *>(dq_accum.as<uint8_t>() + l.dq_accum_bytes) : nullptr;
  p.dq_sem = l.det ? sem : nullptr;
  p.dq_done = l.early && !l.det ? sem : nullptr;
  // The chain (header, "Programmatic dependent launch"): [varlen tile list], prepare, main, convert.
  // The list kernel goes first, launched normally: it reads only cu_seqlens and writes its own bytes
  // of the scratch (past the accumulator and semaphores, which prepare zeroes), so it has completed
  // before prepare starts and the main kernel may read the list before its grid dependency wait.
  if (l.list_bytes > 0) {  // 16 bytes for the count (the entries stay 16-byte aligned), then the entries
    sm90::VarlenListArgs list = l.list;
    uint8_t *at = dq_accum.as<uint8_t>() + l.dq_accum_bytes + l.sem_bytes;
    p.tile_count = list.tile_count = reinterpret_cast<int *>(at);
    p.tiles = list.entries = reinterpret_cast<int2 *>(at + 16);
    if ((e = sm90::launch_varlen_tile_list(list, stream)) != cudaSuccess)
      return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "varlen tile list launch"));
  }

  // The mask walks, launched normally like the list, read by the main kernel's thread 0 before its
  // grid dependency wait. (Mask calls have no semaphores, counters or list: the tables start right
  // after the accumulator, 16-byte aligned.)
  if (l.walk_bytes > 0) {
    MaskWalkArgs walk = l.walk;
    uint8_t *at = dq_accum.as<uint8_t>() + l.dq_accum_bytes + l.sem_bytes + l.list_bytes;
    p.key_walk = walk.key_walk = reinterpret_cast<int4 *>(at);
    const int64_t key_bytes = int64_t(walk.batch) * walk.num_n_blocks * 16;
    p.q_ids = walk.q_ids = walk.doc_q != nullptr ? reinterpret_cast<int2 *>(at + key_bytes) : nullptr;
    if ((e = launch_mask_walk(walk, stream)) != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "mask walk launch"));
  }
  // A block mask's step lists (and a mask mod's tile pointers: launch_block_lists), launched normally
  // like the mask walks (read before the main kernel's grid dependency wait).
  if (l.blocks.count_bytes > 0 && int64_t(l.p.num_bh) * l.p.num_n_blocks > 0) {
    uint8_t *at = dq_accum.as<uint8_t>() + l.dq_accum_bytes + l.sem_bytes + l.list_bytes + l.walk_bytes;
    if ((e = launch_block_lists(l.blocks, at, int64_t(l.p.num_bh) * l.p.num_n_blocks, stream, p)) != cudaSuccess)
      return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "block mask pre-pass"));
  }

  // prepare is launched normally: its inputs (O, dO, LSE) come from whatever ran before in the stream.
  PrepArgs prep = l.prep;
  prep.lse_log2 = lse_log2.as<float>(), prep.dsum = dsum.as<float>();
  prep.dq_accum = p.dq_accum, prep.dq_sem = sem;  // zeroes the semaphores or the counters
  prep.n_sem = l.sem_bytes / 4;
  if ((e = launch_prepare(prep, l.bf16, l.rows, stream)) != cudaSuccess)
    return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "prepare kernel launch"));

  // The main and convert kernels programmatically (each waits for its predecessor itself).
  e = l.bf16 ? launch_main<__nv_bfloat16>(l, p) : launch_main<__half>(l, p);
  if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "main kernel launch"));

  const unsigned conv_blocks = unsigned(std::min<int64_t>((l.conv_threads + 255) / 256, 65535));
  if (l.varlen) {
    ConvertVarlenArgs conv = l.conv_varlen;
    conv.dq_accum = dq_accum.as<float>();
    e = cuda::launch_kernel(l.bf16 ? convert_dq_varlen_kernel<__nv_bfloat16> : convert_dq_varlen_kernel<__half>,
                            dim3(conv_blocks), dim3(256), 0, stream, true, conv);
  } else {
    ConvertArgs conv = l.conv;
    conv.dq_accum = dq_accum.as<float>();
    conv.done = l.early ? sem : nullptr;
    const int64_t early_blocks = int64_t(l.conv.batch) * l.conv.heads_q * l.conv.num_m_blocks;
    conv.next = l.early ? sem + early_blocks * l.conv.done_per_block : nullptr;
    // Early: kEarlyConvertCtasPerSm CTAs per SM (256 threads; a block's 2 chunks at head_dim <= 128).
    // (at least one CTA: with no blocks it takes none and only waits, never an empty launch)
    const unsigned blocks =
        l.early ? unsigned(std::clamp<int64_t>(early_blocks, 1, kEarlyConvertCtasPerSm * sm_count())) : conv_blocks;
    if (l.early)
      e = cuda::launch_kernel(l.bf16 ? convert_dq_early_kernel<__nv_bfloat16> : convert_dq_early_kernel<__half>,
                              dim3(blocks), dim3(256), 0, stream, true, conv);
    else
      e = cuda::launch_kernel(l.bf16 ? convert_dq_kernel<__nv_bfloat16> : convert_dq_kernel<__half>, dim3(blocks),
                              dim3(256), 0, stream, true, conv);
  }
  if (e != cudaSuccess) return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "dQ convert kernel launch"));
  // The sink's gradient from prepare's row sums, launched normally after the chain (it does not
  // delay the main kernel's programmatic launch behind prepare).
  if (l.sink.sinks) {
    cuda::bwd::SinkGradArgs sink = l.sink;
    sink.dsum = dsum.as<float>();
    if ((e = cuda::bwd::launch_sink_grad(sink, stream)) != cudaSuccess)
      return fail(FLASHBOX_ERR_CUDA, cuda_text(e, "sink gradient kernel launch"));
  }
  return FLASHBOX_OK;
}

}  // namespace
}  // namespace flashbox::sm90::bwd

namespace flashbox::detail {

// Declines (the caller falls back to the sm80 family) where this path does not apply (bwd_route.hpp,
// route_decline): a head_dim that is not a multiple of 8 up to 256 (each one runs on the smallest
// instantiation at least as wide: 32 for 8..32, 64 for 40..64, 96 for 72..96, 128 for 104..128, 192 for
// 136..192, 256 above; all read zeros past head_dim and store only head_dim columns; deterministic
// bf16 GQA calls at 8..32 stay on 64, bwd_route.hpp plan_kernel_d), variable-length batches
// and deterministic mode above 128; then not an sm_90 device, a layout the TMA
// cannot describe, a grid too large, a variable-length batch of 0 query or key tokens in all.
// Variable-length batches up to head_dim 128 run on the d32, d64, d96 and d128 instantiations (header of
// this file). Sliding windows, softcap and ALiBi are run-time fields of
// the same kernels (flash_bwd_sm90_kernel.cuh); a learnable sink changes only the LSE they read (the
// forward's, which holds it) and adds sink_grad after them. Deterministic mode orders the dQ adds with
// semaphores behind the dQ accumulator (the d192 and d256 kernels add from registers, unordered), in the
// descending order or, for bf16 fixed-length head_dim 128 and head_dim 64 with GQA, the ascending one
// (det_walk.hpp: "_qdesc" kernels); bf16 head_dim 64 in the descending order without softcap has two
// dQ writers ("_dqpair").
PlanResult plan_sm90_backward(const GradProblem &g, bool size_only) {
  using namespace sm90::bwd;
  using sm90::TensorView;
  const Problem &a = g.fwd;
  const bool varlen = a.varlen();
  // The mask families: document ids, prefix-LM lengths and block masks on their own instantiation
  // (d128, which serves head dims 72..128), the rest declined (bwd_route.hpp, mask_route_decline).
  const bool masks = !mask_family_in_use(a).empty();
  if (masks) {
    MaskRouteCall c;
    c.documents = a.mods.doc_q != nullptr, c.prefix = a.mods.prefix != nullptr;
    c.block_mask = a.block_mask.kv_num_blocks != nullptr, c.mask_mod = a.mod_bits != nullptr;
    c.chunk = a.mods.chunk > 0, c.seqused = a.seqused_q != nullptr || a.seqused_k != nullptr;
    c.varlen = varlen, c.bf16 = a.dtype == FLASHBOX_BFLOAT16, c.deterministic = g.deterministic != 0;
    c.transforms = a.mods.softcap != 0.0f || a.mods.alibi_slopes != nullptr;
    c.head_dim = a.head_dim, c.head_dim_v = a.head_dim_v;
    c.group = a.group, c.q_block = a.block_mask.q_block_size, c.kv_block = a.block_mask.kv_block_size;
    if (const char *reason = mask_route_decline(c))
      return PlanResult::no(std::string(reason) + " (got " + mask_family_in_use(a) + ", head_dim " +
                            std::to_string(a.head_dim) + ")");
  }
  const int kd = masks ? 128 : plan_kernel_d(a.head_dim, g.deterministic, a.dtype == FLASHBOX_BFLOAT16, varlen, a.group);
  if (const char *reason = route_decline(kd, varlen, g.deterministic))
    return PlanResult::no(std::string(reason) + " (got head_dim " + std::to_string(a.head_dim) + ")");
  // head_dim_v != head_dim: the pairs with a kernel of their own (the forward's decision,
  // sm90::dv_kernel; the backward instantiation of its DV, launch_main); src/api runs the others on
  // column slices of V, O and dO. route_decline above already gave varlen and deterministic calls
  // at head_dim > 128 to the slices.
  const int kdv = bwd_kernel_head_dim_v(kd, a.head_dim, a.head_dim_v);
  if (a.head_dim_v != a.head_dim && kdv == 0)
    return PlanResult::no("the sm90 backward has no kernel for head_dim " + std::to_string(a.head_dim) +
                          " with head_dim_v " + std::to_string(a.head_dim_v));
  if (varlen && (a.seqlen_q == 0 || a.seqlen_k == 0))
    return PlanResult::no("the sm90 backward needs at least one query and one key token in a variable-length batch");
  if (const char *reason = sm90::sm90_unavailable_reason()) return PlanResult::no(reason);
  if (a.seqlen_q > INT32_MAX / 2 || a.seqlen_k > INT32_MAX / 2)
    return PlanResult::no("sequence too long for 32-bit coordinates");
  const TensorView q = sm90::attention_view(a.q, a.seqlen_q, a.heads_q, a.batch, a.q_stride, varlen);
  const TensorView k = sm90::attention_view(a.k, a.seqlen_k, a.heads_kv, a.batch, a.k_stride, varlen);
  const TensorView v = sm90::attention_view(a.v, a.seqlen_k, a.heads_kv, a.batch, a.v_stride, varlen);
  const TensorView dout = sm90::attention_view(g.dout, a.seqlen_q, a.heads_q, a.batch, g.dout_stride, varlen);
  if (!size_only)
    for (const TensorView &t : {q, k, v, dout})
      if (!sm90::tma_describable(t))
        return PlanResult::no("TMA needs 16-byte aligned q/k/v/dout and strides that are multiples of 16 B");
  const int bm = block_m_for(kd), bn = block_n_for(kd);
  const int64_t m_blocks = (a.seqlen_q + bm - 1) / bm;
  // Varlen: the key blocks per sequence of the deterministic grid (max_seqlen_k's), and the list's
  // upper bound of (sequence, key block) entries (each sequence's last block may be partial).
  const int64_t max_k = std::min(a.max_seqlen_k, a.seqlen_k), max_q = std::min(a.max_seqlen_q, a.seqlen_q);
  const int64_t n_blocks = varlen ? (max_k + bn - 1) / bn : (a.seqlen_k + bn - 1) / bn;
  const int64_t max_entries = varlen ? a.seqlen_k / bn + a.batch : 0;
  const bool use_list = varlen && !g.deterministic;
  const int64_t ctas = use_list ? max_entries * a.heads_kv : n_blocks * a.batch * a.heads_kv;
  if (ctas > INT32_MAX) return PlanResult::no("grid too large");

  Launch l{};
  // Fixed length: [batch * heads_q, whole query blocks]; varlen: [heads_q, total_q + batch * BM] (header).
  const int64_t seqlen_q_pad = varlen ? a.seqlen_q + a.batch * bm : m_blocks * bm;
  if (seqlen_q_pad > INT32_MAX / 2) return PlanResult::no("variable-length batch too large for 32-bit row indices");
  l.vec_bytes = (varlen ? 1 : a.batch) * a.heads_q * seqlen_q_pad * 4;
  const int accum_d = accum_d_for(kd);
  l.dq_accum_bytes = l.vec_bytes * accum_d;  // rows of the instantiation's width (>= head_dim)
  // Deterministic mode: one int per (batch, query head, query block, consumer warpgroup); varlen one
  // per (query head, row, consumer warpgroup), a block's slot at its first row.
  // Early convert (convert_dq_early_kernel; fixed length, the writer's configurations kd <= 128): without the
  // deterministic mode, one completion counter per (batch, query head, query block) instead (with
  // it, convert polls the semaphores), then convert's work counter. prepare zeroes them, one int per
  // row (m_blocks * NWG + 1 ints, m_blocks * BM >= 64 m_blocks rows).
  // Not with the mask families: the early convert's target (adders_of) counts the window's key
  // blocks, not the mask walks'; they convert after the main grid.
  const bool early = !varlen && kd <= 128 && !masks;
  l.sem_bytes = g.deterministic ? (varlen ? a.heads_q * seqlen_q_pad * kConsumerWarpgroups * 4
                                          : a.batch * a.heads_q * m_blocks * kConsumerWarpgroups * 4)
                : early         ? a.batch * a.heads_q * m_blocks * 4
                                : 0;
  if (early) l.sem_bytes += 4;  // convert's work counter, after them
  l.det = g.deterministic, l.early = early;
  l.list_bytes = use_list ? 16 + 8 * max_entries * a.heads_kv : 0;
  // A window side at least as long as both sequences is unbounded (no row reaches past it), which
  // also keeps the kernel's int arithmetic on it from overflowing.
  cuda::DeviceMods mods = cuda::device_mods(a.mods);
  const int64_t reach = std::max(a.seqlen_q, a.seqlen_k);
  if (a.mods.window_left >= reach) mods.window_left = -1;
  if (a.mods.window_right >= reach) mods.window_right = -1;
  // The mask walks' tables (mask_walk_kernel): an int4 per (batch entry, key block), with documents
  // an int2 per (batch entry, query block).
  l.walk_bytes = masks ? a.batch * n_blocks * 16 + (a.mods.doc_q != nullptr ? a.batch * m_blocks * 8 : 0) : 0;
  // A block mask's step lists (block_walk_kernel): a count per CTA (rounded up to 16 bytes), `slots`
  // steps per CTA, and without the q_* transposes the marks built from kv_* (a byte per mask (batch,
  // head, key block, query block) and kind). A mask mod (always with a block mask) adds a tile
  // pointer per step slot and the entries plane (an int per mask (batch, head, key block, query
  // block)), which the marks pass writes from kv_* with q_* too (flash_bwd_sm90_mask_walks.hpp).
  const flashbox_block_mask &bmk = a.block_mask;
  const bool blocks = masks && bmk.kv_num_blocks != nullptr;
  const bool transposes = blocks && bmk.q_num_blocks != nullptr && bmk.q_indices != nullptr;
  const bool full_kind = blocks && (transposes ? bmk.full_q_num_blocks != nullptr && bmk.full_q_indices != nullptr
                                               : bmk.full_kv_num_blocks != nullptr && bmk.full_kv_indices != nullptr);
  const bool mod = blocks && a.mod_bits != nullptr;
  l.blocks = BlockLists{};
  if (blocks) {
    const int64_t nqb = (a.seqlen_q + bmk.q_block_size - 1) / bmk.q_block_size;
    const int64_t nkvb = (a.seqlen_k + bmk.kv_block_size - 1) / bmk.kv_block_size;
    const int64_t cap = transposes ? std::min(bmk.max_q_blocks, nqb) : nqb;
    const int64_t q_steps = bmk.q_block_size / bm;
    const int64_t slots = a.group * (full_kind ? 2 : 1) * std::max<int64_t>(cap, 0) * q_steps;
    const int64_t cta_count = a.batch * a.heads_kv * n_blocks;
    const auto round16 = [](int64_t x) { return (x + 15) / 16 * 16; };
    const int64_t plane = bmk.batch * bmk.heads * nkvb * nqb;
    BlockLists &bl = l.blocks;
    bl.count_bytes = round16(cta_count * 4), bl.step_bytes = round16(cta_count * slots * 4);
    bl.marks_bytes = transposes ? 0 : (full_kind ? 2 : 1) * round16(plane);
    bl.mod_step_bytes = mod ? round16(cta_count * slots * 8) : 0, bl.entries_bytes = mod ? round16(plane * 4) : 0;
    BlockWalkArgs &w = bl.walk;
    if (transposes) {
      w.num[0] = bmk.q_num_blocks, w.idx[0] = bmk.q_indices;
      if (full_kind) w.num[1] = bmk.full_q_num_blocks, w.idx[1] = bmk.full_q_indices;
    }
    w.mask_batch = bmk.batch, w.mask_heads = bmk.heads, w.max_q_blocks = bmk.max_q_blocks;
    w.num_q_blocks = int(nqb), w.num_kv_blocks = int(nkvb), w.q_steps = int(q_steps);
    w.kv_div = int(bmk.kv_block_size / bn);
    w.heads_kv = int(a.heads_kv), w.group = int(a.group);
    w.num_n_blocks = int(n_blocks), w.num_m_blocks = int(m_blocks);
    w.slots = slots;
    if (mod) w.mod = cuda::device_mask_ext(a);
    BlockMarksArgs &mk = bl.marks;
    if (!transposes || mod) {
      mk.num[0] = bmk.kv_num_blocks, mk.idx[0] = bmk.kv_indices;
      if (full_kind && !transposes) mk.num[1] = bmk.full_kv_num_blocks, mk.idx[1] = bmk.full_kv_indices;
      mk.rows = bmk.batch * bmk.heads * nqb, mk.max_kv_blocks = bmk.max_kv_blocks;
      mk.num_q_blocks = int(nqb), mk.num_kv_blocks = int(nkvb);
      mk.per_row = int(std::clamp<int64_t>(std::min(bmk.max_kv_blocks, nkvb), 0, INT32_MAX));
    }
  }
  std::string name = "cuda_flash_bwd_sm90_d" + std::to_string(kd);
  if (kdv != 0) name += "_dv" + std::to_string(kdv);
  if (masks) name += "_masks";
  if (blocks) name += transposes ? "_blocks" : "_blocks_marks";
  if (mods.window_left >= 0 || (mods.window_right >= 0 && !a.causal)) name += "_window";
  if (mods.capped()) name += "_softcap";
  if (mods.alibi()) name += "_alibi";
  if (varlen) name += "_varlen";
  // Deterministic: the descending order, or the ascending one (det_walk.hpp), which the name says ("_qdesc").
  const bool qdesc = g.deterministic && uses_qdesc_walk(kd, a.dtype == FLASHBOX_BFLOAT16, varlen, a.group);
  if (g.deterministic) name += "_deterministic";
  if (qdesc) name += "_qdesc";
  // bf16 d64 in the descending order: two dQ writers (det_walk.hpp uses_dq_pair), which the name says.
  const bool dqpair = g.deterministic && uses_dq_pair(kd, a.dtype == FLASHBOX_BFLOAT16, qdesc, mods.capped());
  if (dqpair) name += "_dqpair";
  // d128 outside the ascending order runs the dq_lag schedule, bf16 and fp16 (bwd_sm90_consumer.cuh
  // header "dQ one step late"): the name says which schedule ran.
  if (kd == 128 && !qdesc) name += "_dqlag";
  Plan plan{std::move(name),
            2 * l.vec_bytes + l.dq_accum_bytes + l.sem_bytes + l.list_bytes + l.walk_bytes + l.blocks.bytes(),
            {}};
  if (size_only) return {std::move(plan)};

  l.bf16 = a.dtype == FLASHBOX_BFLOAT16, l.kd = kd, l.kdv = kdv, l.qdesc = qdesc;
  l.capsel = kd == 64 && !qdesc && mods.capped();
  l.dqpair = dqpair;
  l.masks = masks;
  l.stream = static_cast<cudaStream_t>(a.stream);
  std::memset(&l.p, 0, sizeof l.p);
  BwdSm90Params &p = l.p;
  const CUtensorMapDataType type = l.bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const int box_cols = kd == 96 || kd == 32 ? 32 : 64;  // the d96 and d32 tiles: 32-column panels, 64B swizzle
  if (!sm90::encode_map(&p.tm_q, &p.ord_q, type, q, a.head_dim, bm, box_cols) ||
      !sm90::encode_map(&p.tm_do, &p.ord_do, type, dout, a.head_dim_v, bm, box_cols) ||
      !sm90::encode_map(&p.tm_k, &p.ord_k, type, k, a.head_dim, bn, box_cols) ||
      !sm90::encode_map(&p.tm_v, &p.ord_v, type, v, a.head_dim_v, bn, box_cols))
    return PlanResult::no("cuTensorMapEncodeTiled rejected the layout of q/k/v/dout");
  p.dk = g.dk, p.dv = g.dv;
  for (int i = 0; i < 3; ++i) p.dk_stride[i] = g.dk_stride[i], p.dv_stride[i] = g.dv_stride[i];
  p.seqlen_q = int(a.seqlen_q), p.seqlen_k = int(a.seqlen_k), p.seqlen_q_pad = int(seqlen_q_pad);
  p.heads_q = int(a.heads_q), p.heads_kv = int(a.heads_kv), p.group = int(a.group);
  p.num_m_blocks = int(m_blocks);
  p.head_dim = int(a.head_dim), p.head_dim_v = int(a.head_dim_v);
  p.num_n_blocks = int(n_blocks), p.num_bh = int(a.batch * a.heads_kv);
  p.chunk_heads = chunk_heads_for(p.num_bh, n_blocks, varlen ? (max_q + bm - 1) / bm * bm : seqlen_q_pad, accum_d);
  p.sem_rows = varlen ? 1 : bm;
  p.num_tiles = int(ctas);
  l.varlen = varlen;
  if (varlen) {
    p.cu_q = a.cu_seqlens_q, p.cu_k = a.cu_seqlens_k;
    p.total_q = int(a.seqlen_q), p.total_k = int(a.seqlen_k), p.max_q = int(max_q), p.max_k = int(max_k);
  }
  p.mods = mods;
  p.transforms = mods.capped() || mods.alibi();
  p.cap_pre = mods.capped() ? a.scale * mods.softcap_inv : 0.f;
  p.unit_log2 = (mods.capped() ? mods.softcap : a.scale) * kLog2e;
  p.scale = a.scale, p.scale_log2 = a.scale_log2;
  if (masks) {  // the tables' pointers are set by the run (scratch)
    p.block_slots = blocks ? l.blocks.walk.slots : 0;  // block_steps, block_count (and mod_steps): the run's
    p.mod_words = mod ? int(bmk.kv_block_size / 32) : 0;
    p.doc_q = a.mods.doc_q, p.doc_k = a.mods.doc_k, p.prefix = a.mods.prefix;
    p.doc_q_stride = a.mods.doc_q_stride, p.doc_k_stride = a.mods.doc_k_stride;
    l.walk = MaskWalkArgs{p.doc_q,        p.doc_k,      p.prefix,      p.doc_q_stride, p.doc_k_stride, mods,
                          int(a.batch),   p.seqlen_q,   p.seqlen_k,    p.num_n_blocks, p.num_m_blocks, bm,
                          bn,             nullptr,      nullptr};
  }
  l.grid = dim3(unsigned(ctas));
  if (use_list) {
    // The forward's list with queries and keys swapped (header): key blocks of 128 as its "query
    // blocks", query blocks of bm as its "key blocks", the window mirrored, kv heads as its heads.
    cuda::DeviceMods mirrored = mods;
    mirrored.window_left = mods.window_right, mirrored.window_right = mods.window_left;
    l.list = {p.cu_k, p.cu_q, int(a.batch), p.total_k, p.total_q, p.max_k, p.max_q, bn, bm, int(a.heads_kv),
              int(max_entries), mirrored, nullptr, nullptr};
  }

  l.prep = PrepArgs{a.o,
                    g.dout,
                    a.lse,
                    {},
                    {},
                    nullptr,
                    nullptr,
                    nullptr,
                    nullptr,
                    0,
                    varlen ? kConsumerWarpgroups : 1,
                    varlen ? 1 : int(a.batch),
                    int(a.heads_q),
                    int(a.seqlen_q),
                    int(seqlen_q_pad),
                    int(a.head_dim_v),  // D = rowsum(dO ∘ O) over V's columns
                    accum_d};
  for (int i = 0; i < 3; ++i) l.prep.o_stride[i] = a.o_stride[i], l.prep.do_stride[i] = g.dout_stride[i];
  if (varlen) l.prep.o_stride[0] = l.prep.do_stride[0] = 0;
  l.rows = (varlen ? 1 : a.batch) * a.heads_q * seqlen_q_pad;
  // prepare's D rows: seqlen_q_pad per (batch, head), the first seqlen_q of them the tokens (varlen:
  // the packed tokens of all sequences, then padding), as the forward's LSE holds them.
  l.sink = {a.mods.sinks, a.lse, nullptr, seqlen_q_pad, g.dsink, varlen ? 1 : int(a.batch), int(a.heads_q),
            int(a.seqlen_q)};
  l.conv = ConvertArgs{nullptr,         g.dq,    {},     int(a.batch), int(a.heads_q), int(a.seqlen_q), p.num_m_blocks,
                       bm,              int(a.head_dim), accum_d, a.scale};
  for (int i = 0; i < 3; ++i) l.conv.dq_stride[i] = g.dq_stride[i];
  l.conv.done = nullptr, l.conv.done_per_block = g.deterministic ? kConsumerWarpgroups : 1;
  l.conv.done_scale = g.deterministic ? 1 : kConsumerWarpgroups;
  l.conv.seqlen_k = int(a.seqlen_k), l.conv.block_n = bn, l.conv.group = int(a.group);
  l.conv.chunk_q_heads = p.chunk_heads * int(a.group), l.conv.m_desc = qdesc, l.conv.mods = mods;
  l.conv_threads = a.batch * a.heads_q * m_blocks * (bm * accum_d / 4096) * 128;  // one per (chunk, t)
  if (varlen) {
    ConvertVarlenArgs &c = l.conv_varlen;
    c.dq = g.dq, c.cu_q = p.cu_q, c.cu_k = p.cu_k;
    c.batch = int(a.batch), c.heads_q = int(a.heads_q), c.total_q = p.total_q, c.total_k = p.total_k;
    c.max_q = p.max_q, c.max_k = p.max_k, c.rows_pad = int(seqlen_q_pad), c.block_m = bm;
    c.head_dim = int(a.head_dim), c.kernel_d = accum_d, c.scale = a.scale;
    for (int i = 0; i < 3; ++i) l.conv_varlen.dq_stride[i] = g.dq_stride[i];
    l.conv_threads = a.heads_q * a.seqlen_q * ((a.head_dim + 63) / 64) * 4;  // one per (head, row, panel, quad)
  }
  plan.run = [l] { return run(l); };
  return {std::move(plan)};
}

}  // namespace flashbox::detail
