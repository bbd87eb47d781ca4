// The order of the Hopper backward's work (FA3's tile_scheduler.hpp plays this part there): which
// tile a CTA takes (tile_of, decode_tile), which query blocks it walks (m_range), where a block's
// per-row vectors and dQ accumulator live (block_row, accum_row), and the deterministic add order
// (last_n_block, first_n_block).
//
// CTA order (tile_of): a one-dimensional grid walked in chunks of `chunk_heads` (batch, kv head)
// pairs; inside a chunk, key block by key block, the chunk's heads innermost. Causal, key block 0 has
// the most query blocks, so the hardware's in-order dispatch starts the longest CTAs first and ends
// on short ones (longest-first list scheduling); the chunk bounds how many heads' Q/dO and dQ
// accumulators are live in L2 at once (the chunk size: chunk_heads_for, flash_bwd_sm90.cu).
//
// Deterministic mode (dq_sem != nullptr): the adds into one dQ chunk happen in a fixed order. A
// semaphore per (batch, query head, query block, consumer) counts the adds that completed; the dQ
// writer waits for its CTA's rank before its bulk reduce-add and signals once the add completed, off
// the consumers' path. Two orders (the plan picks one per problem, det_walk.hpp):
//   descending (fp16, varlen, d64 MHA; bf16 d64 without softcap with two writers): key block
//     last_n_block(m) first, down to first_n_block(m) (FA3's order: with the key blocks started
//     together, the last one that sees query block m reaches it first), rank = last_n_block(m) - n.
//     Key blocks go in descending order inside a chunk, which is shortest-first for causal: the price
//     of this order at short T and with GQA. The walk is the non-deterministic one (head by head,
//     query blocks ascending).
//   ascending (BwdSm90Traits::ascending_order, deterministic-only instantiations: bf16, fixed
//     length, d128 and d64 with GQA): key block first_n_block(m) first, up to last_n_block(m),
//     rank = n - first_n_block(m); key blocks ascending inside a chunk (the longest-first order of the
//     non-deterministic mode) and the walk goes query blocks descending, the group's heads innermost,
//     so that (causal or full, no left window) key block n's walk is a prefix of key block n - 1's:
//     both reach each (head, block) at the same step and n waits only for n - 1's add to complete.
//     With a left window edge the ranges slide up with n, key block n starts on blocks n - 1 never
//     sees (rank 0 there) and reaches the shared ones later than n - 1: no long waits either way.
//   No deadlock, given the hardware's in-order dispatch of blockIdx.x: only CTAs of the same (batch,
//   kv head) add into a query head's dQ, and all of them are in the same chunk, where key block n of a
//   pair comes after every key block n' > n (descending) or every n' < n (ascending). A CTA of rank r
//   waits for the r adds of the key blocks before it in the add order, all earlier in the grid. So
//   the unfinished CTA with the smallest index waits for nothing unfinished; it is resident (every
//   CTA before it was dispatched, and had it not been dispatched no later CTA could be either, so an
//   SM would be free) and finishes; by induction all do. The ranks are 0 .. k - 1 over the k key
//   blocks that add into m (contiguous: first_n_block .. last_n_block, the same visibility test as
//   m_range), so the semaphore reaches each rank. bench/sm90_bwd_det_order_model.py checks both
//   orders by brute force (tile_of, m_range, the ranks, the walks, in-order dispatch over random
//   shapes, causal or not, GQA groups 1-8, seqlen_q != seqlen_k, windows).
//
// Variable-length batches (cu_seqlens, [total, heads, head_dim] tensors; the same instantiations,
// run-time fields): a CTA per (sequence, key block, kv head). Without the deterministic mode the
// CTAs take their tiles from a list the device built before the launch (flash_bwd_sm90.cu: the
// forward's list with queries and keys swapped), longest walk first across sequences, so no CTA is
// launched for padding; a slot past the list's count exits. In deterministic mode the fixed-length
// order above runs over (sequence, kv head) pairs with max_seqlen_k's key blocks, and a CTA past its
// sequence's keys exits. A tile's TMA rows start at its sequence's first key / query token
// (decode_tile: q0, k0) and every mask, m_range and the deterministic order use the sequence's own
// lengths (sq, sk: causal bottom-right aligned per sequence). A box reaching past the sequence reads
// the next sequence's rows: keys past sk are masked as at the end of the keys, and query rows past sq
// are masked explicitly (P = 0, so dS = 0: they add nothing to dV, dK or dQ; fixed length gets the
// same from the TMA's zero rows and LSE = +inf). dK and dV rows past sk are not stored (store_rows).
// The varlen fields and branches also compile for the SPLIT_D configurations, which never run them:
// the plan gives variable-length calls above head_dim 128 to the sm80 family (cu_q is null there, so
// decode_tile, block_row and accum_row take their fixed-length values).
#pragma once
#include <cstdint>

#include "cuda/backward/sm90/bwd_sm90_traits.cuh"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/varlen_span.cuh"

namespace flashbox::sm90::bwd {

// The query blocks [x, y) that hold a row seeing a key of K block n (the window's rows of the
// block's first and last key, clamped to the real rows); empty (x == y) when no row sees any.
// The convert kernel's early path counts a block's adders with the same function (adders_of).
__device__ __forceinline__ int2 m_range(const cuda::DeviceMods &mods, int n_block, int BM, int BN, int sq, int sk) {
  const int shift = sk - sq, k_first = n_block * BN, k_last = min(k_first + BN, sk) - 1;
  const int q_begin = cuda::mods_query_begin(mods, k_first, shift, sq);
  const int q_end = cuda::mods_query_end(mods, k_last, shift, sq);
  if (q_begin >= q_end) return make_int2(0, 0);
  return make_int2(q_begin / BM, (q_end + BM - 1) / BM);
}
__device__ __forceinline__ int2 m_range(const BwdSm90Params &p, int n_block, int BM, int BN, int sq, int sk) {
  return m_range(p.mods, n_block, BM, BN, sq, sk);
}
// The number of key blocks whose CTAs add into query block m (fixed length: every (batch, query
// head) alike), counted by one warp (all 32 lanes call it, the sum in every lane): the key blocks n
// with m in m_range(n), so exactly the steps the main kernel's CTAs run on m (one add per step and
// consumer, one completion signal per step: the early convert's target, flash_bwd_sm90.cu).
__device__ __forceinline__ int adders_of(const cuda::DeviceMods &mods, int m, int BM, int BN, int sq, int sk) {
  const int num_n = (sk + BN - 1) / BN;
  int count = 0;
  for (int n = threadIdx.x % 32; n < num_n; n += 32) {
    const int2 r = m_range(mods, n, BM, BN, sq, sk);
    count += r.x <= m && m < r.y;
  }
  return __reduce_add_sync(0xffffffffu, count);
}

// One CTA's work: key block n_block of kv head hk of batch entry (varlen: sequence) b; tb is the
// maps' batch coordinate (b, or 0 for varlen), q0 / k0 the sequence's first query / key token in the
// packed tensors (0 for fixed length), sq / sk its lengths.
struct BwdTile {
  int n_block, hk, b, tb, q0, k0, sq, sk;
};

// The CTA's tile in shared memory (thread 0 writes it), each field read where it is used by a
// volatile shared load: the fields come from memory (the varlen list, cu_seqlens), so values held in
// registers across the main loop cost registers the consumers do not have (ptxas spilled 116-176 B
// with the fields in registers; the fixed-length kernel had its lengths in the constant bank).
struct TileRef {
  uint32_t addr;
  __device__ __forceinline__ int at(int i) const {
    int v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr + 4 * i));
    return v;
  }
  __device__ __forceinline__ int n_block() const { return at(0); }
  __device__ __forceinline__ int hk() const { return at(1); }
  __device__ __forceinline__ int b() const { return at(2); }
  __device__ __forceinline__ int tb() const { return at(3); }
  __device__ __forceinline__ int q0() const { return at(4); }
  __device__ __forceinline__ int k0() const { return at(5); }
  __device__ __forceinline__ int sq() const { return at(6); }
  __device__ __forceinline__ int sk() const { return at(7); }
  __device__ __forceinline__ int valid() const { return at(8); }
  // The mask families (BwdConfig::MASKS; written by write_mask_walk): the walk's query blocks
  // [walk_begin, walk_end), the batch entry's prefix length (0: none), the keys' document ids' range.
  __device__ __forceinline__ int walk_begin() const { return at(9); }
  __device__ __forceinline__ int walk_end() const { return at(10); }
  __device__ __forceinline__ int prefix() const { return at(11); }
  __device__ __forceinline__ int key_id_lo() const { return at(12); }
  __device__ __forceinline__ int key_id_hi() const { return at(13); }
};

// The mask families' fields of the tile (fixed length): the walk and the keys' ids from the
// pre-pass's row of (batch, key block) (flash_bwd_sm90_mask_walks.cu, mask_walk_kernel), the prefix clamped to
// the keys. Thread 0 writes them beside decode_tile's fields, before the CTA's barrier; the table's
// writer is launched normally before prepare, so it is complete here and may be read before the
// grid dependency wait (as the varlen tile list is).
// With a block mask the walk fields hold {0, the CTA's step count} (block_count, clamped to the
// list's slots) instead of a query-block range (walk_steps).
__device__ __forceinline__ void write_mask_walk(const BwdSm90Params &p, const BwdTile &t, int *dst) {
  const int4 w = p.key_walk[int64_t(t.b) * p.num_n_blocks + t.n_block];
  dst[9] = w.x, dst[10] = w.y;
  if (p.block_steps != nullptr) {
    const int64_t cta = (int64_t(t.b) * p.heads_kv + t.hk) * p.num_n_blocks + t.n_block;
    dst[9] = 0, dst[10] = int(min(max(int64_t(p.block_count[cta]), int64_t(0)), p.block_slots));
  }
  dst[11] = p.prefix != nullptr ? min(max(p.prefix[t.b], 0), t.sk) : 0;
  dst[12] = w.z, dst[13] = w.w;
}

// The query blocks a CTA walks: m_range, or with the mask families the pre-pass's range (the tile's
// walk fields; with a block mask {0, the step count}: walk_steps, block_list). The producer, the
// consumers and the dQ writer all take it from here.
template <class Cfg>
__device__ __forceinline__ int2 walk_range(const BwdSm90Params &p, TileRef t) {
  if constexpr (Cfg::MASKS) {
    return make_int2(t.walk_begin(), t.walk_end());
  } else {
    return m_range(p, t.n_block(), Cfg::BM, Cfg::BN, t.sq(), t.sk());
  }
}

// The number of steps of the CTA's walk (mr: walk_range): every query block of the range for each
// query head of the group, or with a block mask the length of the CTA's step list.
template <class Cfg>
__device__ __forceinline__ int walk_steps(const BwdSm90Params &p, int2 mr) {
  if constexpr (Cfg::MASKS) {
    if (p.block_steps != nullptr) return mr.y;
  }
  return p.group * (mr.y - mr.x);
}

// Block masks: the CTA's step list (null without a block mask), and one step of it. The producer,
// the consumers and the dQ writer take every step from here, so they walk the same sequence. A step
// is one query block of BM rows of one query head of the group, and whether its mask block is full
// (every element admitted but those past the sequence's rows or keys) or partial (the element
// rules apply); the pre-pass (flash_bwd_sm90_mask_walks.cu, block_walk_kernel) wrote the mask's 128-row (or
// larger) blocks as their BM-row query blocks, head by head, partial blocks before full ones.
template <class Cfg>
__device__ __forceinline__ const uint32_t *block_list(const BwdSm90Params &p, TileRef t) {
  if constexpr (Cfg::MASKS) {
    if (p.block_steps != nullptr)
      return p.block_steps + ((int64_t(t.b()) * p.heads_kv + t.hk()) * p.num_n_blocks + t.n_block()) * p.block_slots;
  }
  return nullptr;
}
struct BlockStep {
  int h, m, full;  // query head, query block, full (1) or partial (0)
};
__device__ __forceinline__ BlockStep block_step(uint32_t e, int h_begin) {
  return BlockStep{h_begin + int(e >> 25), int((e >> 1) & 0xffffffu), int(e & 1u)};
}
__host__ __device__ constexpr uint32_t encode_block_step(int head_in_group, int m, int full) {
  return uint32_t(head_in_group) << 25 | uint32_t(m) << 1 | uint32_t(full);
}
// The encoding's limits: 7 bits of head in the group (the route takes groups up to 128 with block
// masks), 24 bits of query block (seqlen_q <= INT32_MAX / 2: at most 2^24 blocks of 64 rows).
constexpr int kBlockStepMaxGroup = 128;

// The (key block, batch * heads_kv + kv head) of CTA `linear` (the order in the file header): key
// blocks ascending inside a chunk, descending for the deterministic descending order.
template <class Cfg>
__device__ __forceinline__ int2 tile_of(const BwdSm90Params &p, int linear) {
  const int per_chunk = p.chunk_heads * p.num_n_blocks;
  const int c = linear / per_chunk, r = linear - c * per_chunk;
  const int heads_here = min(p.chunk_heads, p.num_bh - c * p.chunk_heads);
  int n = r / heads_here;
  const int bh = c * p.chunk_heads + (r - n * heads_here);
  if (!Cfg::ASCENDING && p.dq_sem != nullptr) n = p.num_n_blocks - 1 - n;
  return make_int2(n, bh);
}

// CTA `linear`'s tile; false when it has none (varlen: a list slot past the count, or a key block
// past its sequence's keys in the deterministic grid).
template <class Cfg>
__device__ __forceinline__ bool decode_tile(const BwdSm90Params &p, int linear, BwdTile &t) {
  constexpr int BN = Cfg::BN;
  int n, hk, b;
  if (p.tiles != nullptr) {
    if (linear >= min(*p.tile_count, p.num_tiles)) return false;
    const int2 e = p.tiles[linear];
    n = e.y / p.heads_kv, hk = e.y - n * p.heads_kv, b = e.x;
  } else {
    const int2 tl = tile_of<Cfg>(p, linear);
    n = tl.x, hk = tl.y % p.heads_kv, b = tl.y / p.heads_kv;
  }
  t.n_block = n, t.hk = hk, t.b = b;
  if (p.cu_q == nullptr) {
    t.tb = b, t.q0 = t.k0 = 0, t.sq = p.seqlen_q, t.sk = p.seqlen_k;
    return true;
  }
  const cuda::VarlenSpan s = cuda::varlen_span(p.cu_q, p.cu_k, b, p.total_q, p.total_k, p.max_q, p.max_k);
  t.tb = 0, t.q0 = s.q0, t.k0 = s.k0, t.sq = s.seqlen_q, t.sk = s.seqlen_k;
  return n * BN < t.sk;
}

// The first row of query block m of query head h in the per-row vectors (LSE·log2 e, D): fixed
// length [batch * heads_q, seqlen_q_pad]; varlen [heads_q, seqlen_q_pad] by packed token, from the
// sequence's first token (a block reaching past the sequence reads the next one's values: masked).
__device__ __forceinline__ int64_t block_row(const BwdSm90Params &p, TileRef t, int h, int m, int BM) {
  return (int64_t(t.tb()) * p.heads_q + h) * p.seqlen_q_pad + t.q0() + int64_t(m) * BM;
}
// The same block's first row in the dQ accumulator (times head_dim) and its semaphores. Fixed length:
// block_row. Varlen: block_row + sequence * BM, so that sequence b's blocks start at q0 + b * BM and
// its last, partial block ends before sequence b + 1's first (seqlen_q_pad = total_q + batch * BM).
// They must not overlap: a block's accumulator is in fragment order (every 4096-float chunk mixes
// all 64 of its rows), so the next sequence's adds into an overlapping tail would land on this
// sequence's rows.
__device__ __forceinline__ int64_t accum_row(const BwdSm90Params &p, TileRef t, int h, int m, int BM) {
  return block_row(p, t, h, m, BM) + (p.cu_q != nullptr ? int64_t(t.b()) * BM : 0);
}

// The last key block whose CTA adds into query block m (m inside its m_range), for the order of
// the deterministic adds; only asked for query blocks that this CTA adds to (the result is >= n).
// The CTAs that add into m are the contiguous key blocks up to this one (a row's window is an
// interval sliding with the row, so the keys some row of m sees are one interval), each counted
// once by the semaphore: m_range and this are the same "some real row sees some real key" test.
__device__ __forceinline__ int last_n_block(const BwdSm90Params &p, int m, int BM, int BN, int sq, int sk) {
  const int num_n = (sk + BN - 1) / BN;
  if (p.mods.window_right < 0) return num_n - 1;
  const int r_last = min((m + 1) * BM, sq) - 1;
  const int k_end = cuda::mods_key_end(p.mods, r_last, sk - sq, sk);  // keys < k_end seen
  return min(num_n - 1, (k_end + BN - 1) / BN - 1);
}
// The first key block whose CTA adds into query block m (m inside its m_range), for the ascending
// order: the keys some row of m sees start at its first row's first key (the window's left end
// rises with the row; a first row that sees nothing has its left end clamped to 0, as the first row
// that does see something, bench/sm90_bwd_det_order_model.py checks it).
__device__ __forceinline__ int first_n_block(const BwdSm90Params &p, int m, int BM, int BN, int sq, int sk) {
  if (p.mods.window_left < 0) return 0;
  return cuda::mods_key_begin(p.mods, m * BM, sk - sq, sk) / BN;
}

}  // namespace flashbox::sm90::bwd
