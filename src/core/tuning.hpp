// Kernel choices a benchmark or a test may override: what the tile policies (src/cuda/*/tile_policy.hpp
// and the plans) decide on their own in every other call. They are no part of the public API: a
// caller reaches them only through the private tuning interface (src/api/tuning.hpp; in a build
// with FLASHBOX_TUNING=ON also the C symbol of src/api/tuning_private.h). Every field at its default
// means "the policy's choice", so a default build chooses the kernels the policies choose.
#pragma once
#include <cstdint>

#include "flashbox/flashbox.h"

namespace flashbox::detail {

enum class Sm90Schedule { policy, grid, persistent };

struct TuningOverrides {
  // Family of the CUDA flash forward / backward where the caller's options leave it at auto.
  flashbox_kernel_family forward_family = FLASHBOX_FAMILY_AUTO, backward_family = FLASHBOX_FAMILY_AUTO;
  int sm90_tile_m = 0, sm90_tile_n = 0;  // sm90 forward tile (query rows x keys); 0, 0: the policy's
  Sm90Schedule sm90_schedule = Sm90Schedule::policy;
  int sm90_max_ctas = 0;             // sm90 forward persistent grid cap (implies persistent); 0: SMs - margin
  int sm90_l2_section_mb = -1;       // MB of K/V per L2 section of the persistent order; -1: the policy's
  int sm80_bwd_block_q = 0;          // sm80 backward query rows at head_dim 64 (32 or 64); 0: the policy's
  int64_t kvcache_prefill_rows = 0;  // query rows per KV head from which kvcache runs as prefill; 0: policy

  bool operator==(const TuningOverrides &) const = default;
};

}  // namespace flashbox::detail
