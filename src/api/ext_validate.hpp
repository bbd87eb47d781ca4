// Validation of flashbox_attention_ext (include/flashbox/flashbox.h, "Extension 1"): each field with
// its own message, on top of the plain rules of validate.hpp. Kept apart from validate.cpp so the
// plain path is unchanged; the *_ext entry points (src/api/ext_api.cpp) call, in order:
//   read_ext            struct_size: at least the first version's size; bytes beyond what this
//                       library knows must be zero (a newer caller's fields are never ignored)
//   validate_ext_fields the fp8 fields first (src/api/fp8_args.hpp), head_dim_v >= 0 (on the cpu
//                       <= the cpu's limit; cuda takes any: src/api/head_dim_v_split.hpp),
//                       attention_chunk >= 0, it, seqused_q/k, document ids (both or neither),
//                       prefix lengths and block_mask (not with cu_seqlens) on the cpu only, qv in the
//                       forward only (cpu: head_dim + head_dim_v within the cpu's limit; cuda: the
//                       explicit forward's head_dim_v, no document ids, prefix lengths or block mask),
//                       windows >= -1, window_right -1/0 with causal, softcap finite >= 0,
//                       alibi_batch_stride 0 or >= heads_q, cu_seqlens both or neither, max_seqlen
//                       (what a cuda kernel family lacks, it declines when asked: src/api/dispatch.hpp),
//                       last mask_mod / score_mod and their aux tensors (src/api/mod_api.hpp), which
//                       every backend then refuses
//   plain validation    of plain_view(args, ext): varlen tensors as [1, total, heads, head_dim],
//                       v, o, dout and dv with head_dim_v
//   validate_ext_memory the descales (src/api/fp8_args.hpp), qv as a tensor (like q, rows of head_dim_v), alignment of slopes /
//                       cu_seqlens / seqused / learnable_sink / dsink, outputs disjoint from all of
//                       them (dsink from the sinks too), and on the cpu the slopes and sinks
//                       (finite), cu_seqlens values (0 first, non-decreasing, totals, max_seqlen
//                       bounds), seqused values (0 <= used <= the length) and prefix lengths
//                       (0 <= prefix <= the key count); on cuda those values are in device memory
//                       and not read; the block mask's tables are checked by src/api/block_mask.hpp
#pragma once
#include <cstdint>
#include <string>

#include "api/options.hpp"
#include "api/overlap.hpp"
#include "core/masks.hpp"
#include "core/problem.hpp"
#include "flashbox/flashbox.h"

namespace flashbox::detail {

// Copies the caller's struct (NULL: every field off) into `out`, honouring struct_size.
int read_ext(const flashbox_attention_ext *ext, flashbox_attention_ext &out);

bool ext_is_varlen(const flashbox_attention_ext &e);
// True when no field asks for anything: the call is exactly the plain one.
bool ext_is_plain(const flashbox_attention_ext &e);

// `pass`: the forward or the backward (qv and num_splits are forward fields).
// Also folds head_dim_v == head_dim to 0 (the same request), so the call stays the plain one.
int validate_ext_fields(const flashbox_attention_args &a, flashbox_attention_ext &e, Pass pass);

// The first field set that only the cpu takes, as an error message names it; "" when none is (none
// today: qv runs on the explicit forward, fp8 on the sm90 fp8 forward).
std::string ext_cpu_only_field(const flashbox_attention_ext &e);

// V's and O's head dim: head_dim_v, or head_dim when it is 0.
int64_t ext_head_dim_v(const flashbox_attention_args &a, const flashbox_attention_ext &e);

// The args the plain validation checks: for varlen, batch 1 (tensors [1, total, heads, head_dim],
// lse [1, heads_q, total_q]); otherwise args unchanged.
flashbox_attention_args plain_view(const flashbox_attention_args &a, const flashbox_attention_ext &e);

// `outputs`: the buffers the call writes (as byte views), checked against slopes and cu_seqlens.
int validate_ext_memory(const flashbox_attention_args &a, const flashbox_attention_ext &e, const ByteView *outputs,
                        const char *const *output_names, int n_outputs);

// An input buffer of the extension (slopes, cu_seqlens, ids, block tables) of `bytes` bytes: 4-byte
// aligned, no output inside it.
int check_input_buffer(const void *p, int64_t bytes, const char *name, const ByteView *outputs,
                       const char *const *output_names, int n_outputs);

// The mask and score transform of a validated call (causal folded into window_right).
core::ScoreMods ext_mods(const flashbox_attention_args &a, const flashbox_attention_ext &e);

}  // namespace flashbox::detail
