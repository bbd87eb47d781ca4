// The explicit forward: attention for any head dims up to 576 (Q, K) and 512 (V, O), with
// FlashAttention-3's qv (scores = scale * (q . k + qv . v), the absorbed MLA form). Correctness, not
// speed: it serves the calls no tiled kernel takes (qv on CUDA; the KV-cache call with qv,
// head_dim_v != head_dim or attention_chunk), with plain CUDA cores and fp32 arithmetic.
//   Grid     one CTA per (tile of kWarps query rows, KV head, batch entry), flattened into
//            blockIdx.x. A "row" is (query token, query head) of one KV head's group, packed as
//            the decode kernel packs them (row r = token r / group, head r % group), so the query
//            heads of a GQA group share every staged key.
//   Keys     chunks of kKeys keys over the union of the CTA's visible ranges; each chunk's K and V
//            rows are copied into shared memory as [kKeys][head_dim + head_dim_v] (16-byte loads;
//            zeros for keys past the range or behind an out-of-range cache slot), once per chunk
//            for all rows.
//   Warps    warp w owns row w: its q (and qv) row in shared memory as fp32; a score is a dot
//            product over the row's columns with the lanes over columns and a shuffle reduction,
//            lane j keeping key j's score. The mask (window with the bottom-right shift, causal as
//            window_right = 0, attention_chunk, seqused; a cache's keys counted from
//            cache_leftpad) and the transforms
//            (softcap, then ALiBi) are score_mods.cuh's / mask_ext.cuh's rules; an online softmax
//            (FlashAttention-2 section 3.1) in natural units rescales O when the row max moves.
//   O        lane l accumulates columns l, l + 32, ... of the row (at most 16 per lane), P taken
//            key by key from the lanes by shuffles; a learnable sink joins the denominator at the
//            end (sink.cuh's fold, natural units). A row that sees no key: O = 0, LSE = -inf (or
//            the sink).
// Arguments were validated in src/api: fp16/bf16, head dims multiples of 8 within the limits,
// 16-byte aligned tensors with strides multiples of 8 elements. Device tables (cu_seqlens, seqused,
// cache tables) are clamped before they form an address, as every kernel here does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kvcache_rules.hpp"
#include "cuda/common/element_type.cuh"
#include "cuda/common/launch_attributes.hpp"
#include "cuda/common/mask_ext.cuh"
#include "cuda/common/varlen_span.cuh"
#include "cuda/explicit/explicit_params.hpp"

namespace flashbox::cuda::explicit_fwd {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 32;                        // keys per staged chunk: one per lane
constexpr int kColsPerLane = kMaxHeadDimV / 32;  // O columns a lane accumulates

// Shared memory of a call: the K|V chunk (16-bit) and each warp's q|qv row (fp32).
__host__ __device__ constexpr int smem_bytes(int head_dim, int head_dim_v) {
  return kKeys * (head_dim + head_dim_v) * 2 + kWarps * (head_dim + head_dim_v) * 4;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// The sequence a CTA works on: where its rows and keys start, how many there are, and the
// bottom-right shift. A KV cache's keys are counted from cache_leftpad[b] (the keys before it are
// not the sequence's), as FlashAttention-3 counts them: the window, causal and ALiBi do not depend on
// the origin, attention_chunk's chunks start there.
struct Sequence {
  int64_t q0 = 0, k0 = 0;  // first packed row (varlen), or (cache) the cache row of key 0
  int len_q = 0, len_k = 0;
  int shift = 0;  // len_k - len_q
};

__device__ Sequence sequence_of(const ExplicitParams &p, int b) {
  Sequence s;
  if (p.layout == KeyLayout::varlen) {
    const VarlenSpan span =
        varlen_span(p.cu_seqlens_q, p.cu_seqlens_k, b, p.seqlen_q, p.seqlen_k, p.max_seqlen_q, p.max_seqlen_k);
    s.q0 = span.q0, s.k0 = span.k0, s.len_q = span.seqlen_q, s.len_k = span.seqlen_k;
  } else if (p.layout == KeyLayout::cache) {
    s.len_q = p.seqlen_q;
    const int64_t total = int64_t(p.cache_seqlens[b]) + p.seqlen_new;
    const int end = int(total < 0 ? 0 : (total > p.capacity ? p.capacity : total));
    s.k0 = p.cache_leftpad ? ext_clamp(p.cache_leftpad[b], 0, end) : 0;
    s.len_k = end - int(s.k0);
  } else {
    s.len_q = p.seqlen_q, s.len_k = p.seqlen_k;
  }
  if (p.seqused_q) s.len_q = ext_clamp(p.seqused_q[b], 0, s.len_q);
  if (p.seqused_k) s.len_k = ext_clamp(p.seqused_k[b], 0, s.len_k);
  s.shift = s.len_k - s.len_q;
  return s;
}

// The window and chunk rule of mask_ext.cuh for one row: keys [begin, end).
struct Window {
  int window_left, window_right;
};
__device__ __forceinline__ void row_keys(const ExplicitParams &p, const Sequence &s, int i, int &begin, int &end) {
  const Window w{p.window_left, p.window_right};
  DeviceMaskExt x;
  x.chunk = p.chunk;
  begin = ext_key_begin(w, x, i, s.shift, s.len_k);
  end = ext_key_end(w, x, i, s.shift, s.len_k);
}

// Element offset of key j's row of KV head g in a tensor of strides st, or -1 (reads as zeros).
__device__ __forceinline__ int64_t key_offset(const ExplicitParams &p, const Sequence &s, const int64_t *st, int b,
                                              int g, int j) {
  if (p.layout == KeyLayout::dense) return int64_t(b) * st[0] + int64_t(j) * st[1] + int64_t(g) * st[2];
  if (p.layout == KeyLayout::varlen) return (s.k0 + j) * st[1] + int64_t(g) * st[2];
  const int64_t row = s.k0 + j;  // the key's cache row
  if (row >= p.capacity) return -1;
  const kvcache::CacheSlot slot = kvcache::cache_slot(p.block_table, p.block_table_stride, p.cache_rows,
                                                      p.cache_entries, p.cache_batch_idx, b, row);
  return kvcache::cache_offset(slot, g, st[0], st[1], st[2]);
}

// Element offset of query row i (head h) in a tensor of strides st (q, qv, o).
__device__ __forceinline__ int64_t row_offset(const ExplicitParams &p, const Sequence &s, const int64_t *st, int b,
                                              int h, int i) {
  if (p.layout == KeyLayout::varlen) return (s.q0 + i) * st[1] + int64_t(h) * st[2];
  return int64_t(b) * st[0] + int64_t(i) * st[1] + int64_t(h) * st[2];
}

// Element e of q's row after the rotary turn to `pos` (e >= rotary_dim: unchanged), rounded to T as
// the decode path stores its rotated copy (kvcache_rules.hpp: fp32 without fused multiply-adds).
template <typename T>
__device__ float rotated_q(const ExplicitParams &p, const T *row, int e, int64_t pos) {
  using Tr = ElementTraits<T>;
  if (e >= p.rotary_dim) return Tr::to_float(row[e]);
  const int half = p.rotary_dim / 2;
  const int m = p.rotary_interleaved ? e / 2 : e % half;
  int64_t i0, i1;
  kvcache::rotary_pair(m, p.rotary_dim, p.rotary_interleaved != 0, i0, i1);
  const float x0 = Tr::to_float(row[i0]), x1 = Tr::to_float(row[i1]);
  const T *cs = static_cast<const T *>(p.rotary_cos), *sn = static_cast<const T *>(p.rotary_sin);
  const float c = Tr::to_float(cs[pos * half + m]), sv = Tr::to_float(sn[pos * half + m]);
  const float y =
      e == i0 ? __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sv)) : __fadd_rn(__fmul_rn(x0, sv), __fmul_rn(x1, c));
  return Tr::to_float(Tr::from_float(y));
}

template <typename T>
__global__ void __launch_bounds__(kThreads) explicit_forward_kernel(const ExplicitParams p, int64_t row_tiles) {
  using Tr = ElementTraits<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int d = p.head_dim, dv = p.head_dim_v, width = d + dv;  // a staged key row: [k | v]
  T *skv = reinterpret_cast<T *>(smem);
  float *sq = reinterpret_cast<float *>(smem + kKeys * width * 2);  // [kWarps][d | dv]

  const int64_t cta = blockIdx.x;
  const int tile = int(cta % row_tiles);
  const int g = int((cta / row_tiles) % p.heads_kv);
  const int b = int(cta / row_tiles / p.heads_kv);
  const Sequence s = sequence_of(p, b);
  const int rows = s.len_q * p.group;
  const int row0 = tile * kWarps;
  if (row0 >= rows) return;  // the whole CTA: no barrier is skipped by part of it
  const int row_last = min(rows, row0 + kWarps) - 1;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int row = row0 + warp;
  const bool active = row < rows;
  const int i = active ? row / p.group : 0;
  const int h = g * p.group + (active ? row % p.group : 0);

  // The keys of the CTA: the window and chunk bounds never decrease with the token.
  int lo, hi, unused;
  row_keys(p, s, row0 / p.group, lo, unused);
  row_keys(p, s, row_last / p.group, unused, hi);
  int my_lo = 0, my_hi = 0;
  if (active) row_keys(p, s, i, my_lo, my_hi);

  // This warp's q row (and qv row) into shared memory as fp32.
  float *q_row = sq + warp * width;
  if (active) {
    const T *q = static_cast<const T *>(p.q) + row_offset(p, s, p.q_stride, b, h, i);
    if (p.rotary_cos) {
      int64_t pos = kvcache::rotary_query_position(p.cache_seqlens[b], i, p.rotary_per_token != 0);
      pos = pos < 0 ? 0 : (pos >= p.capacity ? p.capacity - 1 : pos);
      for (int c = lane; c < d; c += 32) q_row[c] = rotated_q(p, q, c, pos);
    } else {
      for (int c = lane; c < d; c += 32) q_row[c] = Tr::to_float(q[c]);
    }
    if (p.qv) {
      const T *qv = static_cast<const T *>(p.qv) + row_offset(p, s, p.qv_stride, b, h, i);
      for (int c = lane; c < dv; c += 32) q_row[d + c] = Tr::to_float(qv[c]);
    }
  }
  const int score_cols = p.qv ? width : d;  // [q | qv] . [k | v], or q . k

  const float slope = (p.alibi_slopes && active) ? p.alibi_slopes[int64_t(b) * p.alibi_batch_stride + h] : 0.f;
  float m = -INFINITY, l = 0.f;
  float acc[kColsPerLane];
#pragma unroll
  for (int t = 0; t < kColsPerLane; ++t) acc[t] = 0.f;

  const T *kbase = static_cast<const T *>(p.k);
  const T *vbase = static_cast<const T *>(p.v);
  const int pieces_k = d / 8, pieces = width / 8;  // 16-byte pieces of a staged row
  for (int j0 = lo; j0 < hi; j0 += kKeys) {
    __syncthreads();  // every thread is done reading the staged chunk before it is overwritten
    for (int idx = tid; idx < kKeys * pieces; idx += kThreads) {
      const int kk = idx / pieces, piece = idx % pieces, j = j0 + kk;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (j < hi) {
        const bool is_k = piece < pieces_k;
        const int64_t off = key_offset(p, s, is_k ? p.k_stride : p.v_stride, b, g, j);
        if (off >= 0)
          val = *reinterpret_cast<const uint4 *>((is_k ? kbase : vbase) + off + (is_k ? piece : piece - pieces_k) * 8);
      }
      *reinterpret_cast<uint4 *>(skv + kk * width + piece * 8) = val;
    }
    __syncthreads();
    if (!active) continue;

    // Scores: key kk's dot product, reduced over the lanes; lane kk keeps it.
    float score = -INFINITY;
    for (int kk = 0; kk < kKeys; ++kk) {
      const T *kv_row = skv + kk * width;
      float part = 0.f;
      for (int c = lane; c < score_cols; c += 32) part += q_row[c] * Tr::to_float(kv_row[c]);
      const float dot = warp_sum(part);
      if (lane == kk) score = dot;
    }
    const int j = j0 + lane;
    const bool visible = j >= my_lo && j < my_hi;
    float x = -INFINITY;
    if (visible) {
      x = score * p.scale;
      if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
      if (p.alibi_slopes) x -= slope * fabsf(float(i + s.shift - j));
    }
    const float m_new = fmaxf(m, warp_max(x));
    if (m_new == -INFINITY) continue;       // nothing visible yet in this row
    const float alpha = __expf(m - m_new);  // 0 while the row had seen no key
    const float pr = visible ? __expf(x - m_new) : 0.f;
    l = l * alpha + warp_sum(pr);
    m = m_new;
#pragma unroll
    for (int t = 0; t < kColsPerLane; ++t) acc[t] *= alpha;
    for (int kk = 0; kk < kKeys; ++kk) {
      const float pk = __shfl_sync(0xffffffffu, pr, kk);
      if (pk == 0.f) continue;  // warp-uniform
      const T *v_row = skv + kk * width + d;
#pragma unroll
      for (int t = 0; t < kColsPerLane; ++t) {
        const int c = lane + 32 * t;
        if (c < dv) acc[t] += pk * Tr::to_float(v_row[c]);
      }
    }
  }
  if (!active) return;

  if (p.sinks) {  // one more column of the denominator, with no value (sink.cuh in natural units)
    const float sink = p.sinks[h];
    const float top = fmaxf(m, sink);
    if (top != -INFINITY) {
      const float alpha = __expf(m - top);
      l = l * alpha + __expf(sink - top);
      m = top;
#pragma unroll
      for (int t = 0; t < kColsPerLane; ++t) acc[t] *= alpha;
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  T *o = static_cast<T *>(p.o) + row_offset(p, s, p.o_stride, b, h, i);
#pragma unroll
  for (int t = 0; t < kColsPerLane; ++t) {
    const int c = lane + 32 * t;
    if (c < dv) o[c] = Tr::from_float(acc[t] * inv);
  }
  if (p.lse && lane == 0) {
    const float lse = l > 0.f ? m + logf(l) : -INFINITY;
    if (p.lse_packed)
      p.lse[int64_t(h) * p.seqlen_q + s.q0 + i] = lse;
    else
      p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen_q + i] = lse;
  }
}

// One element of the appended rows per thread: K (turned by the rotary tables when given) and V
// into their cache slots; a slot out of range (possible only with tables_trusted) is skipped.
template <typename T>
__global__ void explicit_append_kernel(const AppendParams p) {
  using Tr = ElementTraits<T>;
  const int width = p.head_dim + p.head_dim_v;
  const int64_t n = int64_t(p.batch) * p.seqlen_new * p.heads_kv * width;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int e = int(idx % width);
    int64_t rest = idx / width;
    const int g = int(rest % p.heads_kv);
    rest /= p.heads_kv;
    const int i = int(rest % p.seqlen_new);
    const int b = int(rest / p.seqlen_new);
    const int64_t j = int64_t(p.cache_seqlens[b]) + i;
    if (j < 0 || j >= p.capacity) continue;
    const kvcache::CacheSlot slot = kvcache::cache_slot(p.block_table, p.block_table_stride, p.cache_rows,
                                                        p.cache_entries, p.cache_batch_idx, b, j);
    if (e >= p.head_dim) {
      const int64_t dst = kvcache::cache_offset(slot, g, p.v_cache_stride[0], p.v_cache_stride[1], p.v_cache_stride[2]);
      if (dst < 0) continue;
      const T *src =
          static_cast<const T *>(p.v_new) + b * p.v_new_stride[0] + i * p.v_new_stride[1] + g * p.v_new_stride[2];
      static_cast<T *>(p.v_cache)[dst + e - p.head_dim] = src[e - p.head_dim];
      continue;
    }
    const int64_t dst = kvcache::cache_offset(slot, g, p.k_cache_stride[0], p.k_cache_stride[1], p.k_cache_stride[2]);
    if (dst < 0) continue;
    const T *src =
        static_cast<const T *>(p.k_new) + b * p.k_new_stride[0] + i * p.k_new_stride[1] + g * p.k_new_stride[2];
    T out = src[e];
    if (p.rotary_cos && e < p.rotary_dim) {  // decode_rotary.cu's turn: key i at position j
      const int half = p.rotary_dim / 2;
      const int mm = p.rotary_interleaved ? e / 2 : e % half;
      int64_t i0, i1;
      kvcache::rotary_pair(mm, p.rotary_dim, p.rotary_interleaved != 0, i0, i1);
      const float x0 = Tr::to_float(src[i0]), x1 = Tr::to_float(src[i1]);
      const T *cs = static_cast<const T *>(p.rotary_cos), *sn = static_cast<const T *>(p.rotary_sin);
      const float c = Tr::to_float(cs[j * half + mm]), sv = Tr::to_float(sn[j * half + mm]);
      out = Tr::from_float(e == i0 ? __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sv))
                                   : __fadd_rn(__fmul_rn(x0, sv), __fmul_rn(x1, c)));
    }
    static_cast<T *>(p.k_cache)[dst + e] = out;
  }
}

template <typename T>
cudaError_t launch(const ExplicitParams &p, cudaStream_t stream) {
  const int bytes = smem_bytes(p.head_dim, p.head_dim_v);
  if (cudaError_t e = set_max_dynamic_smem_once<explicit_forward_kernel<T>>(smem_bytes(kMaxHeadDim, kMaxHeadDimV));
      e != cudaSuccess)
    return e;
  // Grid rows: every sequence's rows fit (varlen: max_seqlen_q bounds them).
  const int64_t len_q = p.layout == KeyLayout::varlen ? p.max_seqlen_q : p.seqlen_q;
  const int64_t row_tiles = (len_q * p.group + kWarps - 1) / kWarps;
  const int64_t ctas = row_tiles * p.heads_kv * p.batch;
  if (ctas == 0) return cudaSuccess;
  explicit_forward_kernel<T><<<unsigned(ctas), kThreads, bytes, stream>>>(p, row_tiles);
  return cudaGetLastError();
}

template <typename T>
cudaError_t append(const AppendParams &p, cudaStream_t stream) {
  const int64_t n = int64_t(p.batch) * p.seqlen_new * p.heads_kv * (p.head_dim + p.head_dim_v);
  if (n == 0) return cudaSuccess;
  const int64_t blocks = (n + 255) / 256;
  explicit_append_kernel<T><<<unsigned(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_explicit_forward(const ExplicitParams &p, bool bf16, cudaStream_t stream) {
  return bf16 ? launch<__nv_bfloat16>(p, stream) : launch<__half>(p, stream);
}

cudaError_t launch_explicit_append(const AppendParams &p, bool bf16, cudaStream_t stream) {
  return bf16 ? append<__nv_bfloat16>(p, stream) : append<__half>(p, stream);
}

}  // namespace flashbox::cuda::explicit_fwd
