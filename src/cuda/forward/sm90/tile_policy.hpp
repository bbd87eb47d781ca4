// The Hopper forward's tile and schedule policy, in one place (like FlashAttention-3's tile_size.h):
// which compile-time configurations exist, which one a problem gets, and how its tiles are laid on
// the SMs (schedule, CTA count, L2 sections). Host-only; every choice here was measured on the H200
// (docs/perf-history.md, "Hopper forward"). The only inputs besides the problem are the caller's
// options.sm_margin and the private tuning overrides (core/tuning.hpp: benchmarks and tests), which
// replace a choice here and are at their defaults in every other call.
#pragma once
#include <algorithm>
#include <cstdint>
#include <iterator>

#include "core/problem.hpp"

namespace flashbox::sm90 {

// Query rows per CTA (64 per consumer warpgroup) and keys per K/V block.
struct TileChoice {
  int bm, bn;
};

// The instantiated configurations (flash_fwd_sm90_d64.cu, _d96.cu, _d128.cu, _d192.cu, _d256.cu):
//   head_dim 64:  192 x 128 (three consumer warpgroups, FA3's causal tile; the default) and 128 x 128;
//   head_dim 96:  128 x 128 with Q in registers (flash_fwd_sm90_d96.cu; branch sm90-d96, 2026-12-01),
//                 for head_dims 72..96, which did d128's work on the 128 kernel (a third more than
//                 needed: Q K^T and P V over 128 columns). Registers: O 48 + S 64 + P 32 + Q 24 of
//                 240 per thread; shared memory Q 32 KB + two stages of K and V 128 KB + O 32 KB (Q
//                 and K keep d128's 64-column panels, V is three 32-column ones: the kernel's header).
//                 Its list's 128 x 176 names the 128 kernel (as before, for the benchmarks), and
//                 softcap or ALiBi at 72..96 stay on the 128 kernel's MODS configuration
//                 (serving_head_dim): the 96 kernel has none.
//   head_dim 128: 128 x 128 with Q in registers (the default, causal or not) and 128 x 176 (FA3's
//                 non-causal tile: fewer, longer iterations, no registers left for Q; equal to
//                 128 x 128 on the grid since the optimistic softmax, and it cannot stage O in a
//                 buffer of its own on the persistent grid, so it stays for the benchmark's sweep).
//   head_dim 192: 128 x 112 (two consumer warpgroups, flash_fwd_sm90_d192.cu; 2026-12-01). The block
//                 is what the shared memory allows: Q 48 KB + two stages of K and V at 112 x 192 x 2
//                 = 42 KB each make 216 KB of the 227 KB; 128 keys would take 240 KB. Registers:
//                 O 96 + S 56 + P 28 per thread, below head_dim 256's 128 + 32 + 16. O staged in the Q
//                 rows (no room for a buffer of its own).
//                 The list's 128 x 64 is no configuration of its own: it names the head_dim 256 kernel
//                 (the path of head_dims 136..192 before the 192 kernel existed), kept selectable
//                 (the tuning override sm90_tile = 128x64) so that benchmarks time both in one
//                 process; instantiation() maps it.
//   head_dim 256: 128 x 64 (two consumer warpgroups; O takes 128 registers per thread, so neither Q
//                 in registers nor a wider block fits; Q 64 KB + two stages of K and V 128 KB of
//                 shared memory, O staged in the Q rows).
inline constexpr TileChoice kTilesD64[] = {{192, 128}, {128, 128}};
inline constexpr TileChoice kTilesD96[] = {{128, 128}, {128, 176}};
inline constexpr TileChoice kTilesD128[] = {{128, 128}, {128, 176}};
inline constexpr TileChoice kTilesD192[] = {{128, 112}, {128, 64}};
inline constexpr TileChoice kTilesD256[] = {{128, 64}};

// The instantiation that serves a head_dim: every multiple of 8 up to 256 runs the next one up (64,
// 96, 128, 192 or 256) with zero-filled columns, the way the sm80 family does. The tensor maps keep the
// call's head_dim as their innermost dimension, so a box's columns past it are out of bounds: the TMA
// loads them as zeros (Q K^T over them adds exact zeros; P V's extra columns come out 0) and clips
// them on stores (flash_fwd_sm90.cu says where O is written without the TMA). 0: no instantiation
// serves it.
constexpr int kernel_head_dim(int64_t d) {
  return d < 8 || d > 256 || d % 8 != 0 ? 0 : d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256;
}

// Softcap or ALiBi: the MODS configuration (the default tile of head_dim 64 and 128; every score is
// transformed, so the plain configurations do not carry the code). A window needs no configuration
// of its own: it only bounds the tile loop and moves the masks (runtime parameters).
inline bool needs_score_mods(const detail::Problem &p) {
  return p.mods.softcap > 0.0f || p.mods.alibi_slopes != nullptr;
}

// The instantiation whose tile list a problem takes: kernel_head_dim, except that softcap or ALiBi at
// head_dims 72..96 stay on the 128 kernel (its MODS configuration; the 96 kernel has none, and a
// MODS 96 would be two more kernels for calls that ran on the 128 one before at the same speed).
inline int serving_head_dim(const detail::Problem &p) {
  const int kd = kernel_head_dim(p.head_dim);
  return kd == 96 && needs_score_mods(p) ? 128 : kd;
}

// The mask families (document ids, prefix-LM, attention_chunk, seqused, block masks: MaskExtConfig,
// flash_fwd_sm90_config.cuh) run on their own instantiations, 128 x 128 (the tile divides
// FlexAttention's 128 x 128 mask blocks; the 192-row d64 default does not), bf16: head dims 8..64 on
// the 64 one, 72..128 on the 128 one (Q from shared memory: with Q in registers the walk's state
// spilled, ptxas -v). 0: none (the sm80 family takes the call).
constexpr int mask_kernel_head_dim(int64_t d) {
  const int kd = kernel_head_dim(d);
  return kd == 64 ? 64 : kd == 96 || kd == 128 ? 128 : 0;
}

// The shared-memory columns of an instantiation's Q, K and O tiles: whole 64-column panels (96: 128).
constexpr int layout_head_dim(int kernel_dim) { return (kernel_dim + 63) / 64 * 64; }

// The configurations of an instantiation's head_dim (64, 96, 128, 192 or 256), the default first.
struct TileList {
  const TileChoice *begin_, *end_;
  const TileChoice *begin() const { return begin_; }
  const TileChoice *end() const { return end_; }
};
inline TileList tiles_of(int64_t head_dim) {
  if (head_dim == 64) return {std::begin(kTilesD64), std::end(kTilesD64)};
  if (head_dim == 96) return {std::begin(kTilesD96), std::end(kTilesD96)};
  if (head_dim == 128) return {std::begin(kTilesD128), std::end(kTilesD128)};
  if (head_dim == 192) return {std::begin(kTilesD192), std::end(kTilesD192)};
  return {std::begin(kTilesD256), std::end(kTilesD256)};
}

// The kernel a tile of kernel_head_dim(d)'s list runs: its own, except 192's 128 x 64, the 256 kernel,
// and 96's 128 x 176, the 128 kernel.
constexpr int instantiation(int kernel_dim, TileChoice t) {
  return kernel_dim == 192 && t.bn == 64 ? 256 : kernel_dim == 96 && t.bn == 176 ? 128 : kernel_dim;
}

// (head_dim, head_dim_v) pairs with a kernel of their own (FwdConfig's DV; every other pair with
// head_dim_v != head_dim runs the kernels above on column slices of V, src/api/head_dim_v_split.hpp):
//   (192, 128), DeepSeek's prefill: 128 x 128, two consumer warpgroups, for head dims 136..192 with
//                 head_dim_v 8..128. The split ran it as 192 / 192 on a copy of V zero-padded to 192
//                 columns: P.V a third wider than needed, 112-key blocks, and V and O copied. With V
//                 128 wide a stage of K (128 x 192 x 2 = 48 KB) and V (128 x 128 x 2 = 32 KB) is
//                 80 KB: Q 48 KB + two stages 160 KB = 208 KB of the 227 KB, so the block is 128 keys
//                 (144 would take 228 KB); O (32 KB more) is staged in Q's rows. Registers per
//                 consumer thread: O 64 + S 64 + P 32 (192 / 192: 96 + 56 + 28), Q from shared memory.
struct DvKernel {
  int head_dim, head_dim_v;  // the instantiation's D and DV
  TileChoice tile;
};
inline constexpr DvKernel kDvKernels[] = {{192, 128, {128, 128}}};

// The kernel of its own that serves a call's (head_dim, head_dim_v), or null: the first of the list
// whose D is kernel_head_dim(head_dim) and whose DV holds head_dim_v (a multiple of 8: the tensor maps
// end at head_dim_v, so the TMA zero-fills V's columns past it and clips O's stores there, as it does
// past head_dim). The one place that says which pairs run natively (src/api asks it before splitting V).
constexpr const DvKernel *dv_kernel(int64_t head_dim, int64_t head_dim_v) {
  if (head_dim_v == head_dim || head_dim_v < 8 || head_dim_v % 8 != 0) return nullptr;
  const int kd = kernel_head_dim(head_dim);
  for (const DvKernel &k : kDvKernels)
    if (k.head_dim == kd && head_dim_v <= k.head_dim_v) return &k;
  return nullptr;
}

// Which configurations keep Q in registers (FwdConfig::QREG): head_dim 128 and 96 with 128-key
// blocks, where the registers are there (o 64 + s 64 + P 32 + Q 32 of 240 per thread at 128; 48 +
// 64 + 32 + 24 at 96).
constexpr bool q_in_registers(int d, int bn) { return (d == 128 || d == 96) && bn == 128; }

// The tile a problem runs: the first of the list, or the tuning override's (when it names one of
// the list). False when the override names a tile the head_dim has no configuration for. A pair of
// dv_kernel's has one tile (the caller checks the override against it: plan_sm90_forward).
inline bool choose_tile(const detail::Problem &p, TileChoice &out) {
  if (const DvKernel *k = dv_kernel(p.head_dim, p.head_dim_v)) {
    out = k->tile;
    return true;
  }
  const TileList tiles = tiles_of(serving_head_dim(p));
  const detail::TuningOverrides &o = p.tuning.overrides;
  if (o.sm90_tile_m == 0) {
    out = *tiles.begin();
    return true;
  }
  for (const TileChoice t : tiles)
    if (t.bm == o.sm90_tile_m && t.bn == o.sm90_tile_n) return out = t, true;
  return false;
}

// K and V bytes of one (batch, head): what a head's tiles share in L2 (the call's head_dim and
// head_dim_v: the zero-filled columns of a larger instantiation are never read from memory; one byte
// an element for the fp8 forward's e4m3, two for bf16 and fp16).
inline int64_t kv_bytes_per_head(const detail::Problem &p) {
  return p.seqlen_k * (p.head_dim + p.head_dim_v) * (p.dtype == FLASHBOX_FLOAT8_E4M3 ? 1 : 2);
}

// Whether tile t of the problem's instantiation has the MODS configuration (asked for problems that
// need it, whose instantiation is then serving_head_dim's).
inline bool has_score_mods(const detail::Problem &p, TileChoice t) {
  const int kd = serving_head_dim(p);
  if (kd != 64 && kd != 128) return false;
  const TileChoice d = *tiles_of(kd).begin();
  return t.bm == d.bm && t.bn == d.bn;
}

// Causal-like: the tile's work grows with its query block (the causal triangle, or any mask with a
// right edge and no left one). A window with a left edge gives every tile about the same work (at
// most window + BM keys), like the non-causal square, so it is scheduled like it; the longest-first
// order (query blocks descending) stays right for a causal window, whose work does not decrease with
// the block.
inline bool triangular_work(const detail::Problem &p) { return p.mods.window_right >= 0 && p.mods.window_left < 0; }

// Persistent (one CTA per SM walking many tiles) or one CTA per tile. Non-causal: always persistent
// (equal tiles balance, and so do a sliding window's; hiding each tile's start and end: D128 T = 16384 699 against 671 TFLOP/s on
// the grid). Causal: persistent while a head's K and V take at most 4 MB (D64 up to T = 16384, D128
// up to 8192), where hiding each tile's start and end wins (+27% D64 and +15% D128 at T = 2048);
// beyond, one CTA per tile, whose hardware dispatch balances the unequal causal tiles (D128
// T = 16384: 591 against 570 TFLOP/s persistent). A CTA cap (a tuning override of the tests)
// implies persistent. The fp8 forward takes the same rule in its one-byte K/V (persistent while causal
// up to T = 16384 at D128 and 8192 at D256; not measured on its own yet).
inline bool persistent_schedule(const detail::Problem &p) {
  const detail::TuningOverrides &o = p.tuning.overrides;
  switch (o.sm90_schedule) {
    case detail::Sm90Schedule::grid: return o.sm90_max_ctas > 0;
    case detail::Sm90Schedule::persistent: return true;
    case detail::Sm90Schedule::policy: break;
  }
  if (o.sm90_max_ctas > 0 || !triangular_work(p)) return true;
  return kv_bytes_per_head(p) <= (int64_t(4) << 20);
}

// CTAs of the persistent grid: one per SM the caller leaves free of its margin (SMs -
// options.sm_margin; the API checks margin < SMs), never more than the tiles. `sms` is the device's
// SM count, or 0 when it could not be read (then one CTA per tile). A tuning cap replaces the count.
inline int persistent_ctas(const detail::Problem &p, int sms, int num_tiles) {
  int ctas = p.tuning.overrides.sm90_max_ctas;
  if (ctas <= 0) ctas = sms > 0 ? sms - p.tuning.sm_margin : num_tiles;
  return std::max(1, std::min(ctas, num_tiles));
}

// persistent_ctas on the current device (flash_fwd_sm90.cu; the bf16/fp16 and the fp8 forward's
// plans): its SM count, or one CTA per tile when it cannot be read.
unsigned persistent_grid(const detail::Problem &p, int num_tiles);

// (batch, head) pairs per L2 section of the persistent order: as many whole heads' K and V as fit in
// the budget; a 0 budget is one head per section, i.e. the grid's order (head by head, longest query
// block first). One head per section by default: 32 MB sections (FA3's figure) measured 8-12% slower
// for head_dim 128 at T = 2048-8192 and 5% slower for head_dim 64 at 4096 (the snake over rounds then
// deals one CTA the long tiles of several sections in a row); 32 MB for head_dim 64 above 1 MB of
// K/V per head (T > 4096), where one head per section measured 4% slower.
inline int l2_section_heads(const detail::Problem &p) {
  int64_t budget = kernel_head_dim(p.head_dim) == 64 && kv_bytes_per_head(p) > (int64_t(1) << 20) ? int64_t(32) << 20 : 0;
  const int section_mb = p.tuning.overrides.sm90_l2_section_mb;
  if (section_mb >= 0) budget = int64_t(section_mb) << 20;
  const int64_t heads_total = p.batch * p.heads_q;
  return int(std::clamp<int64_t>(budget / std::max<int64_t>(kv_bytes_per_head(p), 1), 1, heads_total));
}

}  // namespace flashbox::sm90
