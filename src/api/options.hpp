// The caller's options and the private tuning overrides (api/tuning.hpp), resolved into one Tuning
// per call. No environment variable changes a result or a kernel choice: a kernel choice is the tile
// policies' unless a benchmark or a test overrides it through the private interface. The one
// environment read of the library is where compiled mods are cached (mod_cache_dir), once per process.
#pragma once
#include <string>

#include "core/problem.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

enum class Pass { forward, backward };

// Checks `options` (may be null: the defaults) and fills `out` from it and from the overrides in
// force (the pass's family where the options leave it at auto). FLASHBOX_OK or
// fail(FLASHBOX_ERR_INVALID_ARGUMENT, message).
int resolve_tuning(const flashbox_options *options, Pass pass, Tuning &out);

// The disk cache of compiled mods (include/flashbox/flashbox.h, "Mods"): $XDG_CACHE_HOME/flashbox/mods
// when XDG_CACHE_HOME is an absolute path (the XDG base directory rule: a relative one is ignored),
// else $HOME/.cache/flashbox/mods, else "" (no disk cache: mods compile in memory). Read on the first
// call and kept for the life of the process. The directory is created when the first entry is written.
const std::string &mod_cache_dir();

}  // namespace flashbox::detail
