// The caller's options and the private tuning overrides (api/tuning.hpp), resolved into one Tuning
// per call. The library reads no environment variable here: a kernel choice is the tile policies'
// unless a benchmark or a test overrides it through the private interface.
#pragma once
#include "core/problem.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

enum class Pass { forward, backward };

// Checks `options` (may be null: the defaults) and fills `out` from it and from the overrides in
// force (the pass's family where the options leave it at auto). FLASHBOX_OK or
// fail(FLASHBOX_ERR_INVALID_ARGUMENT, message).
int resolve_tuning(const flashbox_options *options, Pass pass, Tuning &out);

}  // namespace flashbox::detail
