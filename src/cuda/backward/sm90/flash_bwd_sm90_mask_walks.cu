// The sm90 backward's mask pre-passes: the document / prefix-LM walks (mask_walk_kernel) and the
// block masks' step lists (block_walk_kernel, after block_marks_kernel where q_* is absent or a mask
// mod needs its entries). What they write and why: flash_bwd_sm90_mask_walks.hpp.
#include "cuda/backward/sm90/flash_bwd_sm90_mask_walks.hpp"

#include <algorithm>

#include "cuda/backward/sm90/bwd_sm90_tile_order.cuh"
#include "cuda/common/mask_ext.cuh"

namespace flashbox::sm90::bwd {
namespace {

constexpr int kMaskWalkThreads = 128;

__global__ void __launch_bounds__(kMaskWalkThreads) mask_walk_kernel(const MaskWalkArgs a) {
  const int per_b = a.num_n_blocks + (a.q_ids != nullptr ? a.num_m_blocks : 0);
  const int b = int(blockIdx.x) / per_b, r = int(blockIdx.x) % per_b;
  const int sq = a.seqlen_q, sk = a.seqlen_k, bm = a.block_m, bn = a.block_n;
  const int32_t *ids_q = a.doc_q != nullptr ? a.doc_q + int64_t(b) * a.doc_q_stride : nullptr;
  const int32_t *ids_k = a.doc_q != nullptr ? a.doc_k + int64_t(b) * a.doc_k_stride : nullptr;
  int span_begin = 0, span_end = 0, lo = 0, hi = 0;
  if (r >= a.num_n_blocks) {  // query block m's id range (documents): a scan with no other side
    const int m = r - a.num_n_blocks, r0 = m * bm;
    cuda::doc_span<kMaskWalkThreads>(ids_q, r0, min(r0 + bm, sq), ids_k, 0, 0, &span_begin, &span_end, &lo, &hi);
    if (threadIdx.x == 0) a.q_ids[int64_t(b) * a.num_m_blocks + m] = make_int2(lo, hi);
    return;
  }
  const int n = r, k0 = n * bn;
  int2 mr = m_range(a.mods, n, bm, bn, sq, sk);
  const int prefix = a.prefix != nullptr ? min(max(a.prefix[b], 0), sk) : 0;
  if (k0 < prefix) mr = make_int2(0, (sq + bm - 1) / bm);
  if (ids_q != nullptr) {
    cuda::doc_span<kMaskWalkThreads>(ids_k, k0, min(k0 + bn, sk), ids_q, 0, sq, &span_begin, &span_end, &lo, &hi);
    mr.x = max(mr.x, span_begin / bm), mr.y = min(mr.y, (span_end + bm - 1) / bm);
  }
  if (mr.x >= mr.y) mr = make_int2(0, 0);
  if (threadIdx.x == 0) a.key_walk[int64_t(b) * a.num_n_blocks + n] = make_int4(mr.x, mr.y, lo, hi);
}

__global__ void __launch_bounds__(32) block_walk_kernel(const BlockWalkArgs a) {
  const int64_t cta = blockIdx.x;
  const int n = int(cta % a.num_n_blocks);
  const int64_t bhk = cta / a.num_n_blocks;
  const int hk = int(bhk % a.heads_kv);
  const int64_t b = bhk / a.heads_kv;
  const int c = n / a.kv_div, lane = int(threadIdx.x), nqb = a.num_q_blocks;
  uint32_t *out = a.steps + cta * a.slots;
  int64_t pos = 0;
  for (int hi = 0; hi < a.group; ++hi) {
    const int64_t h = int64_t(hk) * a.group + hi;
    const int64_t row =
        ((a.mask_batch == 1 ? 0 : b) * a.mask_heads + (a.mask_heads == 1 ? 0 : h)) * a.num_kv_blocks + c;
    for (int kind = 0; kind < 2; ++kind) {
      // (selected, not indexed by kind: an indexed parameter array went to the stack)
      const uint8_t *kind_marks = kind == 0 ? a.marks[0] : a.marks[1];
      const int32_t *kind_num = kind == 0 ? a.num[0] : a.num[1], *kind_idx = kind == 0 ? a.idx[0] : a.idx[1];
      const uint8_t *marks = kind_marks != nullptr ? kind_marks + row * nqb : nullptr;
      const int32_t *list = kind_num != nullptr ? kind_idx + row * a.max_q_blocks : nullptr;
      if (marks == nullptr && list == nullptr) continue;
      const int count =
          marks != nullptr ? nqb : int(std::clamp<int64_t>(kind_num[row], 0, std::min<int64_t>(a.max_q_blocks, nqb)));
      for (int j0 = 0; j0 < count; j0 += 32) {
        const int j = j0 + lane;
        int r = -1;
        if (j < count) r = marks != nullptr ? (marks[j] != 0 ? j : -1) : list[j];
        // The query block's steps (r < num_q_blocks: its first row, hence its first step, is a real one).
        const int e = r >= 0 && r < nqb ? min(a.q_steps, a.num_m_blocks - r * a.q_steps) : 0;
        int incl = e;
        for (int off = 1; off < 32; off *= 2) {
          const int v = __shfl_up_sync(0xffffffffu, incl, off);
          if (lane >= off) incl += v;
        }
        const int64_t at = pos + incl - e;
        // A mod's partial entry: its tile moved to the CTA's keys (each step then moves it to its rows).
        const uint32_t *tile = nullptr;
        if (e > 0 && kind == 0 && a.mod_steps != nullptr) {
          const int entry = a.entries[row * nqb + r], bn = a.mod.kv_block / a.kv_div;
          if (entry >= 0) tile = cuda::mod_tile(a.mod, int(b), int(h), r, entry, 0, (n - c * a.kv_div) * bn);
        }
        for (int s = 0; s < e; ++s)
          if (at + s < a.slots) {
            out[at + s] = encode_block_step(hi, r * a.q_steps + s, kind);
            if (a.mod_steps != nullptr)
              a.mod_steps[cta * a.slots + at + s] =
                  tile != nullptr ? tile + int64_t(s) * (a.mod.q_block / a.q_steps) * (a.mod.kv_block / 32) : nullptr;
          }
        pos += __shfl_sync(0xffffffffu, incl, 31);
      }
    }
  }
  if (lane == 0) a.count[cta] = int(std::min(pos, a.slots));
}

__global__ void block_marks_kernel(const BlockMarksArgs a) {
  const int64_t total = a.rows * 2 * a.per_row;
  for (int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < total; x += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(x % a.per_row);
    const int kind = int(x / a.per_row % 2);
    const int64_t row = x / (2 * a.per_row);  // (mask batch * mask heads + mask head) * num_q_blocks + r
    const int32_t *num = kind == 0 ? a.num[0] : a.num[1], *idx = kind == 0 ? a.idx[0] : a.idx[1];
    if (num == nullptr) continue;
    const int count = int(std::clamp<int64_t>(num[row], 0, a.per_row));
    if (j >= count) continue;
    const int c = idx[row * a.max_kv_blocks + j];
    if (c < 0 || c >= a.num_kv_blocks) continue;
    const int64_t bh = row / a.num_q_blocks, r = row % a.num_q_blocks;
    const int64_t at = (bh * a.num_kv_blocks + c) * a.num_q_blocks + r;
    uint8_t *marks = kind == 0 ? a.marks[0] : a.marks[1];
    if (marks != nullptr) marks[at] = 1;
    if (kind == 0 && a.entries != nullptr) a.entries[at] = j;
  }
}

}  // namespace

cudaError_t launch_mask_walk(const MaskWalkArgs &a, cudaStream_t stream) {
  const int64_t ctas = int64_t(a.batch) * (a.num_n_blocks + (a.doc_q != nullptr ? a.num_m_blocks : 0));
  mask_walk_kernel<<<unsigned(ctas), kMaskWalkThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_block_lists(const BlockLists &l, uint8_t *at, int64_t ctas, cudaStream_t stream, BwdSm90Params &p) {
  BlockWalkArgs walk = l.walk;
  BlockMarksArgs marks = l.marks;
  p.block_count = walk.count = reinterpret_cast<int *>(at);
  p.block_steps = walk.steps = reinterpret_cast<uint32_t *>(at + l.count_bytes);
  uint8_t *planes = at + l.count_bytes + l.step_bytes, *mod = planes + l.marks_bytes;
  cudaError_t e = cudaSuccess;
  if (l.marks_bytes > 0) {
    marks.marks[0] = planes, marks.marks[1] = marks.num[1] != nullptr ? planes + l.marks_bytes / 2 : nullptr;
    walk.marks[0] = marks.marks[0], walk.marks[1] = marks.marks[1];
    e = cudaMemsetAsync(planes, 0, size_t(l.marks_bytes), stream);
  }
  if (e == cudaSuccess && l.entries_bytes > 0) {
    const uint32_t **mod_steps = reinterpret_cast<const uint32_t **>(mod);
    p.mod_steps = walk.mod_steps = mod_steps;
    walk.entries = marks.entries = reinterpret_cast<int32_t *>(mod + l.mod_step_bytes);
    e = cudaMemsetAsync(marks.entries, 0xff, size_t(l.entries_bytes), stream);
  }
  if (e == cudaSuccess && marks.num[0] != nullptr) {
    const int64_t threads = marks.rows * 2 * marks.per_row;
    const unsigned blocks = unsigned(std::clamp<int64_t>((threads + 255) / 256, 1, 65535));
    block_marks_kernel<<<blocks, 256, 0, stream>>>(marks);
    e = cudaGetLastError();
  }
  if (e != cudaSuccess) return e;
  block_walk_kernel<<<unsigned(ctas), 32, 0, stream>>>(walk);
  return cudaGetLastError();
}

}  // namespace flashbox::sm90::bwd
