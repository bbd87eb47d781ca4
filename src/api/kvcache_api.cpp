// flashbox_attention_kvcache: validation and dispatch of the KV-cache (decode) entry point.
//
// Rules, checked in this order; each failure names the argument and its value, and nothing is
// written (the append into the cache happens only after every rule, table contents included, held):
//   struct         args not NULL; struct_size == sizeof(flashbox_kvcache_args) or an older struct's
//                  size (read_kvcache_args: the fields it lacks read as 0 / NULL)
//   enums/flags    device, dtype; causal, has_window, tables_trusted 0 or 1
//   sizes          batch, seqlen_q, heads_q, heads_kv, head_dim, cache_entries, cache_rows >= 1;
//                  seqlen_new >= 0 (> 0 exactly when k_new/v_new are given); heads_q % heads_kv == 0
//   paged          block_table: cache_rows (page_size) a multiple of 16, max_blocks_per_seq >= 1,
//                  block_table_stride >= max_blocks_per_seq, no cache_batch_idx
//   scalars        softmax_scale, softcap finite and >= 0; window sides >= -1; num_splits 0..256
//   rotary         cos and sin both or neither, only with k_new, rotary_dim even in 2..head_dim; the
//                  tables [rows >= capacity, rotary_dim / 2] in the dtype (rows cannot be checked)
//   unsupported    CUDA: fp16/bf16, head_dim a multiple of 8 up to 256 (the decode kernels); CPU:
//                  head_dim <= 576
//   qv, head_dim_v head_dim_v >= 0, attention_chunk in 0..2^31 - 1, qv_stride 0 without qv; none of
//   chunk          them with an fp8 cache; CPU: head_dim_v <= 576; CUDA (the explicit forward instead
//                  of the decode kernels, or on a Hopper the MLA decode kernel where its plan takes
//                  the call): head_dim <= 576 and head_dim_v <= 512, multiples of 8;
//                  qv a tensor like q with rows of head_dim_v, overlapping no output (nor the caches
//                  when appending)
//   fp8 cache      cache_dtype 0 or FLASHBOX_FLOAT8_E4M3 (with dtype bf16 or fp16; no rotary; CUDA:
//                  head_dim a multiple of 16); descales only with it, strides >= 0 and 0 for a NULL
//                  one, each buffer 4-byte aligned in the call's device memory, overlapping no output
//                  (nor the caches when appending); on the cpu every value finite and >= 0
//   tensors        q, o, k_cache, v_cache (and k_new, v_new) as flashbox_attention_forward's tensors
//                  (pointer, strides, no self-overlap, alignment); o and lse overlap no input; when
//                  appending, the caches overlap neither each other, q nor k_new/v_new
//   tables         cache_seqlens required; every table pointer 4-byte aligned (and device memory for
//                  CUDA); alibi_slopes and learnable_sink likewise
//   sinks          (cpu) learnable_sink[h] finite; on cuda the values are in device memory, not read
//   contents       (unless tables_trusted) cache_seqlens[b] >= 0 and + seqlen_new <= capacity;
//                  0 <= cache_leftpad[b] <= cache_seqlens[b]; 0 <= cache_batch_idx[b] < cache_entries,
//                  distinct when appending; every page a key or an append of entry b lies on:
//                  0 <= block_table[b][p] < cache_entries
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "api/arg_text.hpp"
#include "api/guarded_call.hpp"
#include "api/kvcache_prefill.hpp"
#include "api/tuning.hpp"
#include "api/validate.hpp"
#include "core/call_state.hpp"
#include "core/dtype.hpp"
#include "core/enum_bits.hpp"
#include "core/error.hpp"
#include "core/explicit_limits.hpp"
#include "core/kvcache_backends.hpp"
#include "flashbox/flashbox.h"

#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flashbox::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TensorDesc tensor(const char *name, const char *stride_name, const void *ptr, const int64_t *stride, int64_t d0,
                  int64_t d1, int64_t heads, int64_t head_dim) {
  return {name, stride_name, ptr, stride, d0, d1, heads, head_dim};
}

bool overlaps(const void *a, int64_t a_bytes, const void *b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + uint64_t(b_bytes) && pb < pa + uint64_t(a_bytes);
}

int check_flags(const flashbox_kvcache_args &a) {
  const int device = core::enum_bits(a.device), dtype = core::enum_bits(a.dtype);
  if (device != FLASHBOX_CPU && device != FLASHBOX_CUDA)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "device = " + str(device) + " is not a flashbox_device (0 = cpu, 1 = cuda)");
  if (!cpu::dtype_valid(dtype))
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                "dtype = " + str(dtype) + " is not a flashbox_dtype (0 = fp32, 1 = fp16, 2 = bf16)");
  const std::pair<const char *, int> flags[] = {{"causal", a.causal},
                                                {"has_window", a.has_window},
                                                {"tables_trusted", a.tables_trusted}};
  for (const auto &[name, v] : flags)
    if (v != 0 && v != 1)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(name) + " = " + str(v) + " must be 0 or 1");
  return FLASHBOX_OK;
}

// The fp8 cache fields (cache_dtype, k/v_descale and their strides) that need no memory read.
int check_cache_dtype(const flashbox_kvcache_args &a) {
  const int cd = core::enum_bits(a.cache_dtype);
  if (cd != 0 && cd != FLASHBOX_FLOAT8_E4M3) {
    const char *what = cd == core::enum_bits(a.dtype) ? " (the call's dtype is named by 0)" : "";
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, "cache_dtype = " + str(cd) + what +
                                                    " is not supported: 0 (the cache in the call's dtype) or "
                                                    "FLASHBOX_FLOAT8_E4M3 = 3 (an e4m3 cache; e5m2 is not supported)");
  }
  const std::pair<const char *, const int64_t *> strides[] = {{"k_descale", a.k_descale_stride},
                                                              {"v_descale", a.v_descale_stride}};
  const float *ptrs[] = {a.k_descale, a.v_descale};
  if (cd == 0) {
    for (int i = 0; i < 2; ++i) {
      if (ptrs[i])
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(strides[i].first) +
                                                       " is set but cache_dtype = 0 (descales dequantize an fp8 "
                                                       "cache; pass NULL)");
      if (strides[i].second[0] != 0 || strides[i].second[1] != 0)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(strides[i].first) + "_stride = {" +
                                                       str(strides[i].second[0]) + ", " + str(strides[i].second[1]) +
                                                       "} is set but cache_dtype = 0 has no descales (pass 0, 0)");
    }
    return FLASHBOX_OK;
  }
  if (a.dtype != FLASHBOX_BFLOAT16 && a.dtype != FLASHBOX_FLOAT16)
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                "cache_dtype = FLASHBOX_FLOAT8_E4M3 with dtype = " + std::string(cpu::dtype_name(a.dtype)) +
                    ": an fp8 cache takes q, k_new, v_new and o in bf16 or fp16");
  if (a.rotary_cos)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "rotary_cos/rotary_sin with cache_dtype = FLASHBOX_FLOAT8_E4M3 are not supported (turn the new "
                "keys before the call)");
  if (a.device == FLASHBOX_CUDA && a.head_dim % 16 != 0)
    return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                "head_dim = " + str(a.head_dim) +
                    " with an fp8 cache on device = cuda: it must be a multiple of 16 (16-byte rows of e4m3)");
  for (int i = 0; i < 2; ++i) {
    const int64_t *st = strides[i].second;
    if (st[0] < 0 || st[1] < 0)
      return fail(FLASHBOX_ERR_BAD_STRIDE, std::string(strides[i].first) + "_stride = {" + str(st[0]) + ", " +
                                               str(st[1]) + "} must be >= 0 (0 broadcasts)");
    if (!ptrs[i] && (st[0] != 0 || st[1] != 0))
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(strides[i].first) + " is NULL (1.0) but " +
                                                     strides[i].first + "_stride = {" + str(st[0]) + ", " +
                                                     str(st[1]) + "} (pass 0, 0 without a descale)");
    if (ptrs[i] && ((a.batch - 1) > (int64_t(1) << 40) / std::max<int64_t>(st[0], 1) ||
                    (a.heads_kv - 1) > (int64_t(1) << 40) / std::max<int64_t>(st[1], 1)))
      return fail(FLASHBOX_ERR_SIZE_OVERFLOW, std::string(strides[i].first) + "_stride = {" + str(st[0]) + ", " +
                                                  str(st[1]) + "} over batch = " + str(a.batch) + " and heads_kv = " +
                                                  str(a.heads_kv) + " is not a plausible descale buffer");
  }
  return FLASHBOX_OK;
}

// V's and O's head dim: head_dim_v, or head_dim when it is 0.
int64_t value_dim(const flashbox_kvcache_args &a) { return a.head_dim_v != 0 ? a.head_dim_v : a.head_dim; }

// qv, head_dim_v and attention_chunk (the fields of the explicit forward): values that need no memory read.
int check_value_fields(const flashbox_kvcache_args &a) {
  if (a.head_dim_v < 0)
    return fail(FLASHBOX_ERR_INVALID_SIZE,
                "head_dim_v = " + str(a.head_dim_v) + " must be >= 0 (0: head_dim_v = head_dim)");
  if (a.attention_chunk < 0 || a.attention_chunk > INT32_MAX)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "attention_chunk = " + str(a.attention_chunk) + " must be within 0..2^31 - 1 (0: off)");
  if (!a.qv && (a.qv_stride[0] != 0 || a.qv_stride[1] != 0 || a.qv_stride[2] != 0))
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "qv_stride = {" + str(a.qv_stride[0]) + ", " + str(a.qv_stride[1]) +
                                                   ", " + str(a.qv_stride[2]) +
                                                   "} is set but qv is NULL (pass 0, 0, 0 without qv)");
  const bool uses = a.qv || value_dim(a) != a.head_dim || a.attention_chunk > 0;
  if (!uses) return FLASHBOX_OK;
  if (a.cache_dtype == FLASHBOX_FLOAT8_E4M3) {
    const std::string what = a.qv ? "qv" : a.attention_chunk > 0 ? "attention_chunk" : "head_dim_v != head_dim";
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                what + " with cache_dtype = FLASHBOX_FLOAT8_E4M3 is not supported (the fp8 cache runs on the decode "
                       "kernels, which take neither)");
  }
  const int64_t dv = value_dim(a);
  if (a.device == FLASHBOX_CPU) {
    if (dv > kCpuMaxHeadDim)
      return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim_v = " + str(dv) + " is not supported on device = cpu (1.." +
                                                         str(kCpuMaxHeadDim) + ")");
    return FLASHBOX_OK;
  }
  namespace ex = cuda_explicit_limits;
  if (a.head_dim % 8 != 0 || a.head_dim > ex::kMaxHeadDim)
    return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                "head_dim = " + str(a.head_dim) + " with qv, head_dim_v != head_dim or attention_chunk on device = cuda: "
                "the explicit forward takes multiples of 8 up to " + str(ex::kMaxHeadDim));
  if (dv % 8 != 0 || dv > ex::kMaxHeadDimV)
    return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                "head_dim_v = " + str(dv) + " on device = cuda: the explicit forward takes multiples of 8 up to " +
                    str(ex::kMaxHeadDimV));
  return FLASHBOX_OK;
}

// Elements one descale buffer spans (0 for NULL).
int64_t descale_span(const float *p, const int64_t *stride, int64_t batch, int64_t heads_kv) {
  return p ? (batch - 1) * stride[0] + (heads_kv - 1) * stride[1] + 1 : 0;
}

// Whether the call runs on the explicit forward on cuda (and never on the prefill path): the fields
// the decode kernels lack.
bool uses_explicit_forward(const flashbox_kvcache_args &a) {
  return a.qv || (a.head_dim_v != 0 && a.head_dim_v != a.head_dim) || a.attention_chunk > 0;
}

int check_sizes(const flashbox_kvcache_args &a) {
  const std::pair<const char *, int64_t> sizes[] = {{"batch", a.batch},          {"seqlen_q", a.seqlen_q},
                                                    {"heads_q", a.heads_q},      {"heads_kv", a.heads_kv},
                                                    {"head_dim", a.head_dim},    {"cache_entries", a.cache_entries},
                                                    {"cache_rows", a.cache_rows}};
  for (const auto &[name, v] : sizes)
    if (v <= 0) return fail(FLASHBOX_ERR_INVALID_SIZE, std::string(name) + " = " + str(v) + " must be >= 1");
  // The kernels index rows, heads and keys with 32-bit integers.
  const std::pair<const char *, int64_t> small[] = {{"batch", a.batch},
                                                    {"seqlen_q", a.seqlen_q},
                                                    {"heads_q", a.heads_q},
                                                    {"cache_entries", a.cache_entries},
                                                    {"cache_rows", a.cache_rows},
                                                    {"seqlen_new", a.seqlen_new},
                                                    {"max_blocks_per_seq", a.max_blocks_per_seq}};
  for (const auto &[name, v] : small)
    if (v > (int64_t(1) << 30))
      return fail(FLASHBOX_ERR_INVALID_SIZE, std::string(name) + " = " + str(v) + " must be <= 2^30");
  if (a.seqlen_new < 0) return fail(FLASHBOX_ERR_INVALID_SIZE, "seqlen_new = " + str(a.seqlen_new) + " must be >= 0");
  if (a.heads_q % a.heads_kv != 0)
    return fail(FLASHBOX_ERR_HEADS_MISMATCH, "heads_q = " + str(a.heads_q) + " is not a multiple of heads_kv = " +
                                                 str(a.heads_kv) + " (GQA needs heads_q % heads_kv == 0)");
  if ((a.k_new == nullptr) != (a.v_new == nullptr))
    return fail(FLASHBOX_ERR_NULL_POINTER, std::string(a.k_new ? "v_new" : "k_new") + " is NULL but " +
                                               (a.k_new ? "k_new" : "v_new") +
                                               " is not (give both new k and v, or neither)");
  if (a.k_new && a.seqlen_new == 0)
    return fail(FLASHBOX_ERR_INVALID_SIZE, "seqlen_new = 0, but k_new/v_new are given (seqlen_new must be >= 1)");
  if (!a.k_new && a.seqlen_new != 0)
    return fail(FLASHBOX_ERR_INVALID_SIZE,
                "seqlen_new = " + str(a.seqlen_new) + ", but k_new/v_new are NULL (seqlen_new must be 0)");
  if (!a.block_table && !a.cache_batch_idx && a.cache_entries < a.batch)
    return fail(FLASHBOX_ERR_INVALID_SIZE, "cache_entries = " + str(a.cache_entries) + " < batch = " + str(a.batch) +
                                               ": without cache_batch_idx, batch entry b uses cache entry b");
  if (a.block_table) {
    if (a.cache_rows % 16 != 0)
      return fail(FLASHBOX_ERR_INVALID_SIZE,
                  "cache_rows (page_size) = " + str(a.cache_rows) + " must be a multiple of 16 for a paged cache");
    if (a.max_blocks_per_seq < 1)
      return fail(FLASHBOX_ERR_INVALID_SIZE, "max_blocks_per_seq = " + str(a.max_blocks_per_seq) + " must be >= 1");
    if (a.block_table_stride < a.max_blocks_per_seq)
      return fail(FLASHBOX_ERR_BAD_STRIDE, "block_table_stride = " + str(a.block_table_stride) +
                                               " must be >= max_blocks_per_seq = " + str(a.max_blocks_per_seq));
    if (a.cache_batch_idx)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  "cache_batch_idx is given with a paged cache (block_table); "
                  "the block table already maps batch entries to pages");
    int64_t n;
    if (__builtin_mul_overflow(a.batch, a.block_table_stride, &n) || n > (int64_t(1) << 40))
      return fail(FLASHBOX_ERR_SIZE_OVERFLOW, "block_table size batch x block_table_stride is too large");
  }
  return FLASHBOX_OK;
}

int check_scalars(const flashbox_kvcache_args &a) {
  if (!a.alibi_slopes && a.alibi_batch_stride != 0)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "alibi_batch_stride = " + str(a.alibi_batch_stride) +
                                                   " is set but alibi_slopes is NULL (pass 0 without ALiBi)");
  if (a.alibi_slopes && a.alibi_batch_stride != 0 &&
      (a.alibi_batch_stride < a.heads_q || a.alibi_batch_stride > (int64_t(1) << 40) / std::max<int64_t>(a.batch, 1)))
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "alibi_batch_stride = " + str(a.alibi_batch_stride) +
                                                   " must be 0 (one row of slopes for every entry) or >= heads_q = " +
                                                   str(a.heads_q) + " (a row per batch entry)");
  if (!std::isfinite(a.softmax_scale) || a.softmax_scale < 0.f)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "softmax_scale = " + std::to_string(a.softmax_scale) +
                                                   " must be finite and >= 0 (0 means 1/sqrt(head_dim))");
  if (!std::isfinite(a.softcap) || a.softcap < 0.f)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "softcap = " + std::to_string(a.softcap) + " must be finite and >= 0 (0: none)");
  if (a.has_window && (a.window_left < -1 || a.window_right < -1))
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "window_left = " + str(a.window_left) + ", window_right = " +
                                                   str(a.window_right) + ": each must be >= -1 (-1 = unbounded)");
  if (a.num_splits < 0 || a.num_splits > 256)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "num_splits = " + str(a.num_splits) + " must be in 0..256 (0 = choose)");
  if ((a.rotary_cos == nullptr) != (a.rotary_sin == nullptr))
    return fail(FLASHBOX_ERR_NULL_POINTER, std::string(a.rotary_cos ? "rotary_sin" : "rotary_cos") +
                                               " is NULL but the other rotary table is not (give both or neither)");
  if (a.rotary_cos) {
    if (!a.k_new)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  "rotary_cos/rotary_sin are given without k_new/v_new (rotary turns "
                  "q and the new keys; the cache is stored rotated already)");
    if (a.rotary_dim < 2 || a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim)
      return fail(FLASHBOX_ERR_INVALID_SIZE,
                  "rotary_dim = " + str(a.rotary_dim) + " must be even and in 2..head_dim = " + str(a.head_dim));
    if (a.rotary_interleaved != 0 && a.rotary_interleaved != 1)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  "rotary_interleaved = " + str(a.rotary_interleaved) + " must be 0 or 1");
    const int64_t es = cpu::dtype_size(a.dtype);
    for (const void *t : {a.rotary_cos, a.rotary_sin})
      if (reinterpret_cast<uintptr_t>(t) % uint64_t(es) != 0)
        return fail(FLASHBOX_ERR_MISALIGNED, std::string(t == a.rotary_cos ? "rotary_cos" : "rotary_sin") + " = " +
                                                 ptr_str(t) + " is not aligned to its " + str(es) + "-byte elements");
  }
  if (a.device == FLASHBOX_CPU) {
    if (a.head_dim > kCpuMaxHeadDim)
      return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim = " + str(a.head_dim) +
                                                         " is not supported on device = cpu (1.." +
                                                         str(kCpuMaxHeadDim) + ")");
  } else {
    if (a.dtype == FLASHBOX_FLOAT32)
      return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, "dtype = fp32 is not supported on device = cuda (fp16, bf16)");
    // The explicit forward (qv, head_dim_v, attention_chunk) has its own limits (check_value_fields)
    // and a one-dimensional grid.
    if (uses_explicit_forward(a)) return FLASHBOX_OK;
    // Kernels for 64, 128 and 256; a smaller multiple of 8 runs on the next one up with zero columns.
    if (a.head_dim % 8 != 0 || a.head_dim > 256)
      return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim = " + str(a.head_dim) +
                                                         " is not supported by the CUDA decode kernels (a multiple "
                                                         "of 8 up to 256)");
    // Grid limits of the split kernel: batch in grid.z, heads_kv x row tiles of 16 query rows in grid.y.
    const int64_t row_tiles = (a.seqlen_q * (a.heads_q / a.heads_kv) + 15) / 16;
    if (a.batch > 65535)
      return fail(FLASHBOX_ERR_INVALID_SIZE,
                  "batch = " + str(a.batch) + " is more than the CUDA decode kernel's 65535");
    if (a.heads_kv * row_tiles > 65535)
      return fail(FLASHBOX_ERR_INVALID_SIZE,
                  "heads_kv x ceil(seqlen_q x heads_q / heads_kv / 16) = " + str(a.heads_kv * row_tiles) +
                      " is more than the CUDA decode kernel's 65535");
  }
  return FLASHBOX_OK;
}

int check_table_pointer(const void *p, const char *name, flashbox_device device) {
  if (p && reinterpret_cast<uintptr_t>(p) % 4 != 0)
    return fail(FLASHBOX_ERR_MISALIGNED, std::string(name) + " = " + ptr_str(p) + " is not 4-byte aligned");
  return validate_device_pointer(p, name, device);
}

int check_tensors(const flashbox_kvcache_args &a) {
  const TensorDesc q = tensor("q", "q_stride", a.q, a.q_stride, a.batch, a.seqlen_q, a.heads_q, a.head_dim);
  // V-side tensors (v_cache, v_new, o, qv) have rows of head_dim_v (head_dim unless set).
  const int64_t dv = value_dim(a);
  const char *dv_name = dv != a.head_dim ? "head_dim_v" : "head_dim";
  const TensorDesc o{"o", "o_stride", a.o, a.o_stride, a.batch, a.seqlen_q, a.heads_q, dv, dv_name};
  const TensorDesc kc = tensor("k_cache", "k_cache_stride", a.k_cache, a.k_cache_stride, a.cache_entries, a.cache_rows,
                               a.heads_kv, a.head_dim);
  const TensorDesc vc{"v_cache", "v_cache_stride", a.v_cache, a.v_cache_stride, a.cache_entries, a.cache_rows,
                      a.heads_kv, dv, dv_name};
  const TensorDesc kn =
      tensor("k_new", "k_new_stride", a.k_new, a.k_new_stride, a.batch, a.seqlen_new, a.heads_kv, a.head_dim);
  const TensorDesc vn{"v_new", "v_new_stride", a.v_new, a.v_new_stride, a.batch, a.seqlen_new, a.heads_kv, dv, dv_name};
  const TensorDesc qv{"qv", "qv_stride", a.qv, a.qv_stride, a.batch, a.seqlen_q, a.heads_q, dv, dv_name};
  std::vector<const TensorDesc *> inputs = {&q, &kc, &vc};
  if (a.k_new) inputs.insert(inputs.end(), {&kn, &vn});
  if (a.qv) inputs.push_back(&qv);
  // The dtype of each tensor: the caches in cache_dtype (0: the call's dtype), the rest in dtype.
  const flashbox_dtype cache_dt = a.cache_dtype == FLASHBOX_FLOAT8_E4M3 ? FLASHBOX_FLOAT8_E4M3 : a.dtype;
  auto dtype_of = [&](const TensorDesc *t) { return t == &kc || t == &vc ? cache_dt : a.dtype; };
  for (const TensorDesc *t : inputs)
    if (int rc = validate_tensor(*t, dtype_of(t), a.device)) return rc;
  if (int rc = validate_tensor(o, a.dtype, a.device)) return rc;
  for (const TensorDesc *t : inputs)
    if (int rc = validate_disjoint(o, a.dtype, *t, dtype_of(t))) return rc;
  if (a.k_new) {
    for (const TensorDesc *t : {&q, &vc, &kn, &vn})
      if (int rc = validate_disjoint(kc, cache_dt, *t, dtype_of(t))) return rc;
    for (const TensorDesc *t : {&q, &kn, &vn})
      if (int rc = validate_disjoint(vc, cache_dt, *t, dtype_of(t))) return rc;
    if (a.qv)  // qv is read while the caches are appended to
      for (const TensorDesc *c : {&kc, &vc})
        if (int rc = validate_disjoint(*c, cache_dt, qv, a.dtype)) return rc;
  }
  if (a.lse) {
    if (reinterpret_cast<uintptr_t>(a.lse) % 4 != 0)
      return fail(FLASHBOX_ERR_MISALIGNED, "lse = " + ptr_str(a.lse) + " is not 4-byte aligned");
    const int64_t lse_bytes = a.batch * a.heads_q * a.seqlen_q * 4;
    inputs.push_back(&o);
    for (const TensorDesc *t : inputs)
      if (overlaps(a.lse, lse_bytes, t->ptr, tensor_span_bytes(*t, dtype_of(t))))
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    "lse = " + ptr_str(a.lse) + " overlaps " + t->name + " = " + ptr_str(t->ptr) + " in memory");
  }
  if (!a.cache_seqlens)
    return fail(FLASHBOX_ERR_NULL_POINTER, "cache_seqlens is NULL (one int32 length per batch entry)");
  if (int rc = validate_device_available(a.device)) return rc;
  for (const TensorDesc *t : inputs)
    if (int rc = validate_device_pointer(t->ptr, t->name, a.device)) return rc;
  if (int rc = validate_device_pointer(a.o, "o", a.device)) return rc;
  if (int rc = validate_device_pointer(a.lse, "lse", a.device)) return rc;
  const std::pair<const void *, const char *> tables[] = {{a.cache_seqlens, "cache_seqlens"},
                                                          {a.block_table, "block_table"},
                                                          {a.cache_batch_idx, "cache_batch_idx"},
                                                          {a.cache_leftpad, "cache_leftpad"},
                                                          {a.alibi_slopes, "alibi_slopes"},
                                                          {a.learnable_sink, "learnable_sink"},
                                                          {a.k_descale, "k_descale"},
                                                          {a.v_descale, "v_descale"}};
  for (const auto &[ptr, name] : tables)
    if (int rc = check_table_pointer(ptr, name, a.device)) return rc;
  // A descale buffer is read while o, lse and (when appending) the caches are written.
  const std::pair<const float *, const int64_t *> descales[] = {{a.k_descale, a.k_descale_stride},
                                                                {a.v_descale, a.v_descale_stride}};
  for (int i = 0; i < 2; ++i) {
    const auto &[ptr, stride] = descales[i];
    if (!ptr) continue;
    const char *name = i == 0 ? "k_descale" : "v_descale";
    const int64_t bytes = descale_span(ptr, stride, a.batch, a.heads_kv) * 4;
    std::vector<std::pair<const void *, int64_t>> written = {{a.o, tensor_span_bytes(o, a.dtype)}};
    if (a.lse) written.push_back({a.lse, a.batch * a.heads_q * a.seqlen_q * 4});
    if (a.k_new) {
      written.push_back({a.k_cache, tensor_span_bytes(kc, cache_dt)});
      written.push_back({a.v_cache, tensor_span_bytes(vc, cache_dt)});
    }
    for (const auto &[w, wbytes] : written)
      if (overlaps(ptr, bytes, w, wbytes))
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(name) + " = " + ptr_str(ptr) +
                                                       " overlaps an output of the call (o, lse, or a cache being "
                                                       "appended to) in memory");
    if (a.device == FLASHBOX_CPU)
      for (int64_t b = 0; b < a.batch; ++b)
        for (int64_t g = 0; g < a.heads_kv; ++g) {
          const float s = ptr[b * stride[0] + g * stride[1]];
          if (!std::isfinite(s) || s < 0.f)
            return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                        std::string(name) + "[" + str(b) + ", " + str(g) + "] = " + std::to_string(s) + " (batch " +
                            str(b) + ", kv head " + str(g) + ") must be finite and >= 0 (a dequantisation factor)");
        }
  }
  if (int rc = validate_device_pointer(a.rotary_cos, "rotary_cos", a.device)) return rc;
  if (int rc = validate_device_pointer(a.rotary_sin, "rotary_sin", a.device)) return rc;
  if (a.learnable_sink && a.device == FLASHBOX_CPU)
    for (int64_t h = 0; h < a.heads_q; ++h)
      if (!std::isfinite(a.learnable_sink[h]))
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "learnable_sink[" + str(h) + "] = " +
                                                       std::to_string(a.learnable_sink[h]) + " must be finite");
  return FLASHBOX_OK;
}

// The integer tables, on the host: read directly for CPU, copied (and the stream synchronised) for CUDA.
struct HostTables {
  std::vector<int32_t> seqlens, table, batch_idx, leftpad;
};

int copy_table(const flashbox_kvcache_args &a, const int32_t *src, int64_t rows, int64_t cols, int64_t stride,
               std::vector<int32_t> &dst, [[maybe_unused]] const char *name) {
  dst.assign(size_t(rows * cols), 0);
  if (!src) {
    dst.clear();
    return FLASHBOX_OK;
  }
  if (a.device == FLASHBOX_CPU) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * stride, cols, dst.begin() + r * cols);
    return FLASHBOX_OK;
  }
#ifdef FLASHBOX_HAVE_CUDA
  const auto stream = static_cast<cudaStream_t>(a.stream);
  cudaError_t e = cudaMemcpy2DAsync(dst.data(), size_t(cols) * 4, src, size_t(stride) * 4, size_t(cols) * 4,
                                    size_t(rows), cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(FLASHBOX_ERR_CUDA, std::string("reading ") + name + " from the device: " + cudaGetErrorString(e));
  }
#endif
  return FLASHBOX_OK;
}

int check_contents(const flashbox_kvcache_args &a, KvcacheProblem &p) {
  HostTables t;
  if (int rc = copy_table(a, a.cache_seqlens, 1, a.batch, a.batch, t.seqlens, "cache_seqlens")) return rc;
  if (int rc = copy_table(a, a.cache_leftpad, 1, a.batch, a.batch, t.leftpad, "cache_leftpad")) return rc;
  if (int rc = copy_table(a, a.cache_batch_idx, 1, a.batch, a.batch, t.batch_idx, "cache_batch_idx")) return rc;
  if (int rc =
          copy_table(a, a.block_table, a.batch, a.max_blocks_per_seq, a.block_table_stride, t.table, "block_table"))
    return rc;
  int64_t max_total = 0;
  std::set<int32_t> used_entries;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t len = t.seqlens[b], total = len + a.seqlen_new;
    const std::string at = std::string("[").append(str(b)).append("]");
    if (len < 0) return fail(FLASHBOX_ERR_INVALID_SIZE, "cache_seqlens" + at + " = " + str(len) + " must be >= 0");
    if (total > p.capacity)
      return fail(FLASHBOX_ERR_INVALID_SIZE, "cache_seqlens" + at + " = " + str(len) +
                                                 (a.seqlen_new ? " + seqlen_new = " + str(a.seqlen_new) : "") +
                                                 " exceeds the cache's capacity of " + str(p.capacity) + " keys (" +
                                                 (p.paged ? "block_table: max_blocks_per_seq = " + str(a.max_blocks_per_seq) +
                                                                " x page_size = " + str(a.cache_rows)
                                                          : "cache_rows = " + str(a.cache_rows)) +
                                                 ")");
    if (!t.leftpad.empty() && (t.leftpad[b] < 0 || t.leftpad[b] > len))
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "cache_leftpad" + at + " = " + str(t.leftpad[b]) +
                                                     " must be in 0..cache_seqlens" + at + " = " + str(len));
    if (!t.batch_idx.empty()) {
      const int64_t e = t.batch_idx[b];
      if (e < 0 || e >= a.cache_entries)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "cache_batch_idx" + at + " = " + str(e) + " is out of range 0.." +
                                                       str(a.cache_entries - 1) +
                                                       " (cache_entries = " + str(a.cache_entries) + ")");
      if (a.k_new && !used_entries.insert(int32_t(e)).second)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "cache_batch_idx" + at + " = " + str(e) +
                                                       " repeats an earlier entry; with k_new/v_new two batch entries "
                                                       "would append to the same cache entry");
    }
    if (p.paged) {
      const int64_t pages = ceil_div(total, a.cache_rows);
      for (int64_t pg = 0; pg < pages; ++pg) {
        const int64_t blk = t.table[size_t(b * a.max_blocks_per_seq + pg)];
        if (blk < 0 || blk >= a.cache_entries)
          return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "block_table[" + str(b) + "][" + str(pg) + "] = " + str(blk) +
                                                         " is out of range 0.." + str(a.cache_entries - 1) +
                                                         " (num_blocks = cache_entries = " + str(a.cache_entries) +
                                                         "; page " + str(pg) + " holds keys " + str(pg * a.cache_rows) +
                                                         ".. of batch entry " + str(b) + ")");
      }
    }
    max_total = std::max(max_total, total);
  }
  p.max_total_keys = max_total;
  p.lengths_known = true;
  p.seqlens = std::move(t.seqlens), p.leftpad = std::move(t.leftpad), p.batch_idx = std::move(t.batch_idx);
  return FLASHBOX_OK;
}

// The first version of the struct ended at `stream`, the second (2026-12-01) at alibi_batch_stride,
// the third (2026-12-06) at learnable_sink, the fourth (2026-12-06) at v_descale_stride; their
// callers' struct_size is one of these.
constexpr int32_t kKvcacheArgsV1Size = int32_t(offsetof(flashbox_kvcache_args, alibi_batch_stride));
constexpr int32_t kKvcacheArgsV2Size = int32_t(offsetof(flashbox_kvcache_args, learnable_sink));
constexpr int32_t kKvcacheArgsV3Size = int32_t(offsetof(flashbox_kvcache_args, cache_dtype));
constexpr int32_t kKvcacheArgsV4Size = int32_t(offsetof(flashbox_kvcache_args, qv));

// The caller's struct into `full` (fields a shorter, older struct lacks are 0).
int read_kvcache_args(const flashbox_kvcache_args *args, flashbox_kvcache_args &full) {
  if (!args) return fail(FLASHBOX_ERR_NULL_POINTER, "args is NULL");
  const int32_t size = args->struct_size;
  if (size != int32_t(sizeof(flashbox_kvcache_args)) && size != kKvcacheArgsV1Size && size != kKvcacheArgsV2Size &&
      size != kKvcacheArgsV3Size && size != kKvcacheArgsV4Size)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "struct_size = " + str(size) + " does not match sizeof(flashbox_kvcache_args) = " +
                    str(int64_t(sizeof(flashbox_kvcache_args))) + " (or " + str(kKvcacheArgsV1Size) + ", " +
                    str(kKvcacheArgsV2Size) + ", " + str(kKvcacheArgsV3Size) + " or " + str(kKvcacheArgsV4Size) +
                    ", its earlier versions) of this library (set it to sizeof; headers of another version?)");
  full = flashbox_kvcache_args{};
  std::memcpy(&full, args, size_t(size));
  full.struct_size = int32_t(sizeof(flashbox_kvcache_args));
  return FLASHBOX_OK;
}

int validate_kvcache(const flashbox_kvcache_args *args, KvcacheProblem &p, bool read_tables) {
  const flashbox_kvcache_args &a = *args;
  if (int rc = check_flags(a)) return rc;
  if (int rc = check_sizes(a)) return rc;
  if (int rc = check_scalars(a)) return rc;
  if (int rc = check_cache_dtype(a)) return rc;
  if (int rc = check_value_fields(a)) return rc;
  if (int rc = check_tensors(a)) return rc;
  p.args = args;
  p.paged = a.block_table != nullptr;
  p.capacity = p.paged ? a.max_blocks_per_seq * a.cache_rows : a.cache_rows;
  if (p.capacity > int64_t(INT32_MAX))
    return fail(FLASHBOX_ERR_INVALID_SIZE, "the cache holds " + str(p.capacity) + " keys per batch entry (" +
                                               (p.paged ? "max_blocks_per_seq x page_size" : "cache_rows") +
                                               "); at most 2^31 - 1 are supported");
  p.max_total_keys = p.capacity;
  p.head_dim_v = value_dim(a);
  p.explicit_forward = uses_explicit_forward(a);
  // With qv the score sums head_dim + head_dim_v products: 0 means 1/sqrt of both (FlashAttention-3).
  const int64_t score_dim = a.qv ? a.head_dim + p.head_dim_v : a.head_dim;
  p.scale = a.softmax_scale != 0.f ? a.softmax_scale : float(1.0 / std::sqrt(double(score_dim)));
  if (read_tables && !a.tables_trusted)
    if (int rc = check_contents(a, p)) return rc;
  return FLASHBOX_OK;
}

}  // namespace
}  // namespace flashbox::detail

using namespace flashbox::detail;

extern "C" {

FLASHBOX_API int flashbox_attention_kvcache(const flashbox_kvcache_args *caller_args) {
  return guarded_call("flashbox_attention_kvcache", [&]() -> int {
    flashbox_kvcache_args full;
    if (int rc = read_kvcache_args(caller_args, full)) return rc;
    const flashbox_kvcache_args *args = &full;
    KvcacheProblem p;
    if (int rc = validate_kvcache(args, p, true)) return rc;
    const int64_t rows_override = tuning_overrides().kvcache_prefill_rows;
    const int64_t prefill_rows = rows_override > 0 ? rows_override : kPrefillRows;
    if (takes_prefill_path(p, prefill_rows)) return kvcache_as_prefill(p);
#ifdef FLASHBOX_HAVE_CUDA
    if (args->device == FLASHBOX_CUDA) {
      if (!p.explicit_forward) return cuda_kvcache_attention(p);
#ifdef FLASHBOX_HAVE_SM90
      // MLA decode on a Hopper: its own kernel where it takes the call (plan_kvcache_mla says why not).
      if (PlanResult mla = plan_kvcache_mla(p); mla.plan) return mla.plan->run();
#endif
      return cuda_kvcache_explicit(p);
    }
#endif
    return cpu_kvcache_attention(p);
  });
}

FLASHBOX_API int flashbox_kvcache_num_splits(const flashbox_kvcache_args *caller_args) {
  int splits = 1;  // the CPU implementation does not split
  const int rc = guarded_call("flashbox_kvcache_num_splits", [&]() -> int {
    flashbox_kvcache_args full;
    if (int e = read_kvcache_args(caller_args, full)) return e;
    const flashbox_kvcache_args *args = &full;
    KvcacheProblem p;
    if (int e = validate_kvcache(args, p, true)) return e;
    if (p.explicit_forward) {  // the explicit forward does not split the keys; the MLA kernel may
#ifdef FLASHBOX_HAVE_SM90
      if (args->device == FLASHBOX_CUDA) (void)plan_kvcache_mla(p, &splits);
#endif
      return FLASHBOX_OK;
    }
    if (args->num_splits > 0) {
      splits = args->num_splits;
      return FLASHBOX_OK;
    }
#ifdef FLASHBOX_HAVE_CUDA
    if (args->device == FLASHBOX_CUDA) return cuda_kvcache_num_splits(p, splits);
#endif
    return FLASHBOX_OK;
  });
  return rc == FLASHBOX_OK ? splits : -rc;
}

}  // extern "C"
