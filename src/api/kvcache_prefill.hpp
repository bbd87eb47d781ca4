// Chunked prefill through the flash forward: a flashbox_attention_kvcache call with many query rows
// per KV head (hundreds of new tokens against a cache) runs as one forward call per batch entry on
// the cache's own rows, instead of the decode kernels (which read the whole cache once per 16 query
// rows). One entry point, flashbox_attention_kvcache, thus serves prefill, chunked prefill and decode.
//
// Taken when (takes_prefill_path):
//   the tables were read on the host (not tables_trusted), so each entry's key range is known;
//   a contiguous cache (optionally through cache_batch_idx; not paged: the forward reads rows one
//   stride apart) in the call's dtype (an fp8 cache always takes the decode kernels: the forward's fp8
//   path wants q in e4m3 too, and a dequantized copy of the cache would cost more bytes than the
//   decode kernels read for up to a few hundred query rows), no rotary (the decode path turns q and the new keys), every entry with at least
//   one visible key row (the forward needs seqlen_k >= 1), no qv, head_dim_v or attention_chunk
//   (those run on the explicit forward on cuda, the row loop on the cpu);
//   seqlen_q x (heads_q / heads_kv) >= min_rows (kPrefillRows; benchmarks move it through the
//   private tuning interface, kvcache_prefill_rows),
//   where the decode kernels would read the cache min_rows / 16 times or more; on CUDA a head_dim the
//   sm80 forward takes (a multiple of 8 up to 256), so that every family choice has a taker before the
//   cache is written.
// The call: new keys appended first (the decode family's append), then for entry b the forward on
// q[b], keys [leftpad_b, cache_seqlens_b + seqlen_new) of cache entry cache_batch_idx[b] (or b),
// o[b], lse[b], with the causal flag, window, softcap and ALiBi slopes of the call: bottom-right
// alignment, windows and ALiBi positions are relative to the last key, so slicing the keys at
// leftpad keeps every score and mask of the decode semantics (core/kvcache_rules.hpp).
#pragma once
#include <cstdint>

#include "core/kvcache_problem.hpp"

namespace flashbox::detail {

// Query rows per KV head from which the forward serves the call. Measured on the H200
// (bench/prefill_crossover.py, GQA 32/8 D128 causal, bench/results/2026-12-01_main_h200_check): the
// decode kernels cost rows / 16 cache reads, the forward about one, plus a serial call per batch entry;
// prefill / decode time at 128 rows: 1.02 (batch 1, 32k keys) and 2.0 (batch 8, 8k keys); at 256 rows
// 0.70 and 1.06; at 512 rows 0.54 and 0.54. 256 is the best single threshold of those points.
inline constexpr int64_t kPrefillRows = 256;

bool takes_prefill_path(const KvcacheProblem &p, int64_t min_rows);
int kvcache_as_prefill(const KvcacheProblem &p);

}  // namespace flashbox::detail
