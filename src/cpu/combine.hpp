// The combine of split partial attention results on the CPU (flashbox_attention_combine): per
// (batch, token, head) row, L = log sum_s exp(L_s) and O = sum_s exp(L_s - L) O_s over the parts with
// a finite-or-+inf L_s (a part of -inf saw no key and is skipped, its O_s unread); a row with no such
// part gets O = 0 and L = -inf. Arguments are validated by src/api/combine_api.cpp.
#pragma once
#include "flashbox/flashbox.h"

namespace flashbox::cpu {

void combine_partials(const flashbox_combine_args &a);

}  // namespace flashbox::cpu
