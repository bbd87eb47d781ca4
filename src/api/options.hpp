// The caller's kernel options and the environment overrides, resolved into one Tuning per call.
// This is the only file of the library that reads the environment: the variables are parsed once per
// process (README.md, "Overrides", lists them with their values and defaults) and fill the fields a
// caller left at their defaults. A bad value is an error of every CUDA flash call, naming the variable.
#pragma once
#include "core/problem.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

enum class Pass { forward, backward };

// Checks `options` (may be null: the defaults) and merges the environment into `out`.
// FLASHBOX_OK or fail(FLASHBOX_ERR_INVALID_ARGUMENT, message).
int resolve_tuning(const flashbox_options *options, Pass pass, Tuning &out);

// The query rows per KV head from which a kvcache call takes the chunked-prefill route: `rows` (the
// library's default) unless FLASHBOX_KVCACHE_PREFILL_ROWS sets it (benchmarks time both routes on
// one shape with it). FLASHBOX_OK or fail(FLASHBOX_ERR_INVALID_ARGUMENT, the variable's message).
int kvcache_prefill_rows(int64_t &rows);

}  // namespace flashbox::detail
