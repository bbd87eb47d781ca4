// The fp8 fields of flashbox_attention_ext (dtype FLASHBOX_FLOAT8_E4M3, out_dtype, q/k/v_descale and
// their strides; include/flashbox/flashbox.h), checked by the extension's entry points
// (src/api/ext_api.cpp) in two steps, before anything is written:
//   validate_fp8_fields  (from validate_ext_fields) out_dtype a flashbox_dtype; an fp8 call: forward
//                        only (cpu, or cuda where the sm90 fp8 forward takes it), out_dtype bf16
//                        or fp16, no qv, descale strides >= 0 and 0 when the pointer is NULL; any other
//                        call: out_dtype 0 or the call's dtype (folded to 0, so the call stays plain),
//                        no descale pointer or stride
//   validate_fp8_memory  (from validate_ext_memory) each descale buffer 4-byte aligned, its extent within
//                        int64, no output inside it, and every value it holds finite and >= 0 (on cuda
//                        read back to the host first: the three copies queued into page-locked memory,
//                        one synchronisation of the call's stream)
#pragma once
#include "api/options.hpp"
#include "api/overlap.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

// Whether the call's q, k and v are fp8 e4m3 (a.dtype's bytes; any value may be there).
bool is_fp8_call(const flashbox_attention_args &a);

// o's dtype: out_dtype for an fp8 call (after validate_fp8_fields), else the call's dtype.
flashbox_dtype ext_out_dtype(const flashbox_attention_args &a, const flashbox_attention_ext &e);

int validate_fp8_fields(const flashbox_attention_args &a, flashbox_attention_ext &e, Pass pass);

// `a`: the caller's args (varlen: batch = the sequences, which index the descales).
int validate_fp8_memory(const flashbox_attention_args &a, const flashbox_attention_ext &e, const ByteView *outputs,
                        const char *const *output_names, int n_outputs);

}  // namespace flashbox::detail
