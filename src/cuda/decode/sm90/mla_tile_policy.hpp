// The Hopper MLA decode kernel's route and tile policy, host code only (CPU builds compile it too, so
// the route is tested without a GPU): which KV-cache calls the kernel takes (mla_decline: the reason
// it does not, empty when it does) and how many splits of the keys a call runs (mla_choose_splits).
// src/api/kvcache_api.cpp asks the plan (mla_decode_api.cu), which asks these; a declined call runs
// on the explicit forward.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "flashbox/flashbox.h"

namespace flashbox::sm90::mla {

constexpr int64_t kQkDim = 576, kVDim = 512, kLatentDim = 64;
constexpr int kTileRows = 64, kBlockKeys = 64;
constexpr int kMaxSplits = 128;

// Why the kernel does not take the call (validated arguments; cc_major: the device's compute
// capability), or "" when it does. The kernel computes scale * (q . k + qv . v) over one latent KV
// head, in the qv form (head_dim 64, qv and v_cache 512 wide) or FlashMLA's 576 form (head_dim 576,
// no qv, v_cache the first 512 columns of k_cache: the same pointer and strides), bf16 or fp16,
// causal or not, contiguous (with cache_batch_idx) or paged caches, any seqlen_q x heads_q (the last
// 64-row tile padded).
inline std::string mla_decline(const flashbox_kvcache_args &a, int cc_major) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (a.device != FLASHBOX_CUDA) return "device is not cuda";
  if (cc_major != 9) return "compute capability " + n(cc_major) + ".x: the MLA decode kernel is sm_90a (Hopper)";
  if (a.dtype != FLASHBOX_BFLOAT16 && a.dtype != FLASHBOX_FLOAT16) return "dtype is not bf16 or fp16";
  if (a.cache_dtype != 0) return "an fp8 cache";
  const int64_t dv = a.head_dim_v != 0 ? a.head_dim_v : a.head_dim;
  if (dv != kVDim) return "head_dim_v = " + n(dv) + ": the MLA decode kernel takes 512";
  if (a.qv) {
    if (a.head_dim != kLatentDim) return "head_dim = " + n(a.head_dim) + " with qv: the MLA decode kernel takes 64";
  } else {
    if (a.head_dim != kQkDim)
      return "head_dim = " + n(a.head_dim) +
             " without qv: the MLA decode kernel takes 576 (FlashMLA's form) or "
             "64 with qv";
    if (a.v_cache != a.k_cache || a.v_cache_stride[0] != a.k_cache_stride[0] ||
        a.v_cache_stride[1] != a.k_cache_stride[1])
      return "head_dim 576 without qv and v_cache not the first 512 columns of k_cache (the same pointer and "
             "strides)";
  }
  if (a.heads_kv != 1) return "heads_kv = " + n(a.heads_kv) + ": the MLA decode kernel takes one latent KV head";
  if (a.k_new) return "k_new/v_new (an append): not in the MLA decode kernel";
  if (a.has_window && (a.window_left >= 0 || a.window_right >= 0)) return "a sliding window";
  if (a.softcap != 0.f) return "softcap";
  if (a.alibi_slopes) return "ALiBi slopes";
  if (a.learnable_sink) return "learnable sinks";
  if (a.attention_chunk > 0) return "attention_chunk";
  if (a.cache_leftpad) return "cache_leftpad";
  if (a.batch > 65535) return "batch = " + n(a.batch) + " is more than the grid's 65535";
  // 16-byte copies of q, qv and cache rows; 4-byte stores of o.
  const auto misaligned16 = [](const void *p, const int64_t *s, int count) {
    bool bad = reinterpret_cast<uintptr_t>(p) % 16 != 0;
    for (int i = 0; i < count; ++i) bad = bad || s[i] % 8 != 0;
    return bad;
  };
  if (misaligned16(a.q, a.q_stride, 3)) return "q or its strides are not 16-byte aligned";
  if (a.qv && misaligned16(a.qv, a.qv_stride, 3)) return "qv or its strides are not 16-byte aligned";
  if (misaligned16(a.k_cache, a.k_cache_stride, 2) || misaligned16(a.v_cache, a.v_cache_stride, 2))
    return "k_cache / v_cache or their strides are not 16-byte aligned";
  if (reinterpret_cast<uintptr_t>(a.o) % 4 != 0 || a.o_stride[0] % 2 || a.o_stride[1] % 2 || a.o_stride[2] % 2)
    return "o or its strides are not 4-byte aligned";
  return "";
}

// The split count: each (batch entry, 64-row tile) is one CTA per split, one CTA per SM (its shared
// memory), so the grid runs in waves of `sms`; a CTA spends about kStartBlocks key blocks' time
// before its first product (the Q tile and the first K/V block in flight) and a split launch adds
// the combine (kCombineBlocks, plus its partial outputs). Cost in units of one 64-key block of one
// CTA:  waves(base * s) * (ceil(blocks / s) + kStartBlocks) + (s > 1) * kCombineBlocks;  the fewest
// splits within 2 % of the best. Not yet measured on a GPU (the constants are estimates).
inline int mla_choose_splits(int64_t base_ctas, int64_t max_keys, int sms) {
  constexpr double kStartBlocks = 2.0, kCombineBlocks = 3.0;
  const int64_t blocks = std::max<int64_t>(1, (max_keys + kBlockKeys - 1) / kBlockKeys);
  const int max_s = int(std::min<int64_t>(kMaxSplits, blocks));
  const auto cost = [&](int s) {
    const int64_t waves = (base_ctas * s + sms - 1) / std::max(1, sms);
    const int64_t per = (blocks + s - 1) / s;
    return double(waves) * (double(per) + kStartBlocks) + (s > 1 ? kCombineBlocks : 0.0);
  };
  double best = cost(1);
  for (int s = 2; s <= max_s; ++s) best = std::min(best, cost(s));
  for (int s = 1; s <= max_s; ++s)
    if (cost(s) <= best * 1.02) return s;
  return 1;
}

}  // namespace flashbox::sm90::mla
