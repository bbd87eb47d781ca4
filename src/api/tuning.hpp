// The private tuning interface: how benchmarks and tests reach the kernel choices the tile policies
// make (core/tuning.hpp lists them). Not public API: tests use it through flashbox_internal, and a
// build with FLASHBOX_TUNING=ON (a benchmark build) also exports it to C and Python through
// flashbox_private_tuning_set (api/tuning_private.h). A default build never sets it, so every call
// takes the policies' choices.
//
// The overrides are one process-wide set (a benchmark times one setting, then another; PyTorch runs
// the backward on a thread of its own, which must see the same set). Calls read it once, at the
// start (resolve_tuning), so a change takes effect from the next call.
#pragma once
#include "core/tuning.hpp"

namespace flashbox::detail {

// The overrides in force (all defaults unless a benchmark or a test set some).
TuningOverrides tuning_overrides();

// Replaces the overrides after checking each field (FLASHBOX_OK, or fail(FLASHBOX_ERR_INVALID_ARGUMENT,
// naming the field) and the set unchanged).
int set_tuning_overrides(const TuningOverrides &o);

// Sets one field by name from text, the form benchmark scripts pass (NULL or "" value: back to the
// policy's choice):
//   forward_family, backward_family = sm80 | sm90 | auto
//   sm90_tile = MxN (e.g. 128x176)       sm90_schedule = grid | persistent | policy
//   sm90_max_ctas = N >= 1               sm90_l2_section_mb = N >= 0
//   sm80_bwd_block_q = 32 | 64           kvcache_prefill_rows = N >= 1
// FLASHBOX_OK, or fail(FLASHBOX_ERR_INVALID_ARGUMENT) naming the key or the value.
int set_tuning(const char *key, const char *value);

// Sets the overrides for one scope (a test), restoring the previous set at its end.
class ScopedTuning {
 public:
  explicit ScopedTuning(const TuningOverrides &o);
  ~ScopedTuning();
  ScopedTuning(const ScopedTuning &) = delete;
  ScopedTuning &operator=(const ScopedTuning &) = delete;

 private:
  TuningOverrides previous_;
};

}  // namespace flashbox::detail
