// Mods in attention calls: the checks of flashbox_attention_ext's mask_mod / score_mod /
// mask_mod_broadcast fields and the mods' auxiliary tensors (src/api/mod_api.cpp, beside
// flashbox_mod_create). Called by validate_ext_fields (src/api/ext_validate.cpp) once the other
// fields are checked; FLASHBOX_ERR_UNSUPPORTED_IMPL naming the field for a mod no backend takes: any
// mod on the cpu (it never runs device code), a score mod on cuda, a mask mod with cu_seqlens. A
// mask mod on cuda passes; src/api/mask_mod_tiles.hpp runs it.
#pragma once
#include "flashbox/flashbox.h"

namespace flashbox::detail {

int check_ext_mods(const flashbox_attention_args &a, const flashbox_attention_ext &e);

}  // namespace flashbox::detail
