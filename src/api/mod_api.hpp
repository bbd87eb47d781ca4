// Mods in attention calls: the checks of flashbox_attention_ext's mask_mod / score_mod fields and
// their auxiliary tensors (src/api/mod_api.cpp, beside flashbox_mod_create). Called by
// validate_ext_fields (src/api/ext_validate.cpp) once the other fields are checked; it returns
// FLASHBOX_ERR_UNSUPPORTED_IMPL naming the field for a well-formed mod, since no backend takes one
// yet: the CPU never runs device code, and the CUDA kernels will take them in a later step, through
// the CompiledMod the handle holds (src/jit/compiled_mod.hpp).
#pragma once
#include "flashbox/flashbox.h"

namespace flashbox::detail {

int check_ext_mods(const flashbox_attention_args &a, const flashbox_attention_ext &e);

}  // namespace flashbox::detail
