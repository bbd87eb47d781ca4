// Validation of the C API's arguments; the rules are listed in validate.hpp.
#include "api/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "api/arg_text.hpp"
#include "api/overlap.hpp"
#include "core/enum_bits.hpp"
#include "core/backends.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

#ifdef FLASHBOX_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flashbox::detail {
namespace {

const char *const kDimName[3] = {"batch", "seq", "head"};

std::string stride_arg(const TensorDesc &t, int i) {
  return std::string(t.stride_name) + "[" + str(i) + "] (" + kDimName[i] + ")";
}

bool mul(int64_t a, int64_t b, int64_t &out) { return !__builtin_mul_overflow(a, b, &out); }
bool add(int64_t a, int64_t b, int64_t &out) { return !__builtin_add_overflow(a, b, &out); }

// a * b * c * d (* e) without overflow; false if any step overflows.
bool product(std::initializer_list<int64_t> xs, int64_t &out) {
  out = 1;
  for (int64_t x : xs)
    if (!mul(out, x, out)) return false;
  return true;
}

int64_t extent(const TensorDesc &t, int i) { return i == 0 ? t.batch : i == 1 ? t.seq : t.heads; }

const char *impl_str(int impl) {
  switch (impl) {
    case FLASHBOX_AUTO: return "auto";
    case FLASHBOX_NAIVE: return "naive";
    case FLASHBOX_BLOCKED: return "blocked";
    case FLASHBOX_FLASH: return "flash";
  }
  return "unknown";
}

// Last byte offset + 1 of a tensor (strides already known positive); false on int64 overflow.
bool span_bytes(const TensorDesc &t, flashbox_dtype dtype, int64_t &bytes) {
  int64_t last = t.head_dim - 1, term;
  for (int i = 0; i < 3; ++i) {
    if (!mul(extent(t, i) - 1, t.stride[i], term) || !add(last, term, last)) return false;
  }
  return add(last, 1, last) && mul(last, cpu::dtype_size(dtype), bytes);
}

using core::enum_bits;

int64_t lse_bytes(const flashbox_attention_args &a) { return a.batch * a.heads_q * a.seqlen_q * 4; }

}  // namespace

const char *device_name(int device) {
  switch (device) {
    case FLASHBOX_CPU: return "cpu";
    case FLASHBOX_CUDA: return "cuda";
  }
  return "unknown";
}

TensorDesc tensor_q(const flashbox_attention_args &a) {
  return {"q", "q_stride", a.q, a.q_stride, a.batch, a.seqlen_q, a.heads_q, a.head_dim};
}
TensorDesc tensor_k(const flashbox_attention_args &a) {
  return {"k", "k_stride", a.k, a.k_stride, a.batch, a.seqlen_k, a.heads_kv, a.head_dim};
}
TensorDesc tensor_v(const flashbox_attention_args &a, int64_t head_dim_v) {
  if (head_dim_v == 0 || head_dim_v == a.head_dim)
    return {"v", "v_stride", a.v, a.v_stride, a.batch, a.seqlen_k, a.heads_kv, a.head_dim};
  return {"v", "v_stride", a.v, a.v_stride, a.batch, a.seqlen_k, a.heads_kv, head_dim_v, "head_dim_v"};
}
TensorDesc tensor_o(const flashbox_attention_args &a, int64_t head_dim_v) {
  if (head_dim_v == 0 || head_dim_v == a.head_dim)
    return {"o", "o_stride", a.o, a.o_stride, a.batch, a.seqlen_q, a.heads_q, a.head_dim};
  return {"o", "o_stride", a.o, a.o_stride, a.batch, a.seqlen_q, a.heads_q, head_dim_v, "head_dim_v"};
}

int validate_scalars(const flashbox_attention_args &a, int64_t head_dim_v) {
  // Enum fields come from C or FFI callers and may hold any int. Reading one as its C++ enum type
  // when it is outside the enum's range is undefined behaviour, so their bytes are read as ints.
  const int device = enum_bits(a.device), impl = enum_bits(a.impl), dtype = enum_bits(a.dtype);
  if (device != FLASHBOX_CPU && device != FLASHBOX_CUDA)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "device = " + str(device) + " is not a flashbox_device (0 = cpu, 1 = cuda)");
  if (impl < FLASHBOX_AUTO || impl > FLASHBOX_FLASH)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "impl = " + str(impl) + " is not a flashbox_impl (0 = auto, 1 = naive, 2 = blocked, 3 = flash)");
  if (dtype == FLASHBOX_FLOAT8_E4M3)
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                "dtype = 3 (FLASHBOX_FLOAT8_E4M3) is taken by flashbox_attention_forward_ext only, whose "
                "flashbox_attention_ext names the output's dtype (out_dtype = bf16 or fp16) and the descales; "
                "the plain calls have no output dtype, and no backward takes fp8 (as in FlashAttention-3)");
  if (!cpu::dtype_valid(dtype))
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, "dtype = " + str(dtype) +
                                                    " is not a flashbox_dtype (0 = fp32, 1 = fp16, 2 = bf16, "
                                                    "3 = fp8 e4m3 (forward_ext only); fp8 e5m2 is not supported)");
  const std::pair<const char *, int64_t> sizes[] = {{"batch", a.batch},       {"seqlen_q", a.seqlen_q},
                                                    {"seqlen_k", a.seqlen_k}, {"heads_q", a.heads_q},
                                                    {"heads_kv", a.heads_kv}, {"head_dim", a.head_dim}};
  for (const auto &[name, value] : sizes)
    if (value <= 0) return fail(FLASHBOX_ERR_INVALID_SIZE, std::string(name) + " = " + str(value) + " must be >= 1");
  if (a.heads_q % a.heads_kv != 0)
    return fail(FLASHBOX_ERR_HEADS_MISMATCH, "heads_q = " + str(a.heads_q) + " is not a multiple of heads_kv = " +
                                                 str(a.heads_kv) + " (GQA needs heads_q % heads_kv == 0)");
  if (a.causal != 0 && a.causal != 1)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "causal = " + str(a.causal) + " must be 0 or 1");
  if (!std::isfinite(a.softmax_scale) || a.softmax_scale < 0.0f)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "softmax_scale = " + std::to_string(a.softmax_scale) +
                                                   " must be finite and >= 0 (0 means 1/sqrt(head_dim))");
  // Element and byte counts of every dense extent the library may touch or allocate per tensor.
  const int64_t es = cpu::dtype_size(a.dtype);
  int64_t n;
  if (!product({a.batch, a.seqlen_q, a.heads_q, a.head_dim, es}, n))
    return fail(FLASHBOX_ERR_SIZE_OVERFLOW,
                "q/o byte count batch = " + str(a.batch) + " x seqlen_q = " + str(a.seqlen_q) + " x heads_q = " +
                    str(a.heads_q) + " x head_dim = " + str(a.head_dim) + " x " + str(es) + " bytes overflows int64");
  if (!product({a.batch, a.seqlen_k, a.heads_kv, a.head_dim, es}, n))
    return fail(FLASHBOX_ERR_SIZE_OVERFLOW,
                "k/v byte count batch = " + str(a.batch) + " x seqlen_k = " + str(a.seqlen_k) + " x heads_kv = " +
                    str(a.heads_kv) + " x head_dim = " + str(a.head_dim) + " x " + str(es) + " bytes overflows int64");
  const int64_t dv = head_dim_v ? head_dim_v : a.head_dim;
  if (dv != a.head_dim) {
    if (!product({a.batch, a.seqlen_q, a.heads_q, dv, es}, n))
      return fail(FLASHBOX_ERR_SIZE_OVERFLOW,
                  "o byte count batch = " + str(a.batch) + " x seqlen_q = " + str(a.seqlen_q) + " x heads_q = " +
                      str(a.heads_q) + " x head_dim_v = " + str(dv) + " x " + str(es) + " bytes overflows int64");
    if (!product({a.batch, a.seqlen_k, a.heads_kv, dv, es}, n))
      return fail(FLASHBOX_ERR_SIZE_OVERFLOW,
                  "v byte count batch = " + str(a.batch) + " x seqlen_k = " + str(a.seqlen_k) + " x heads_kv = " +
                      str(a.heads_kv) + " x head_dim_v = " + str(dv) + " x " + str(es) + " bytes overflows int64");
  }
  // Score matrix of one head (naive materialises S and P): its element count must be representable.
  if (!product({a.batch, a.heads_q, a.seqlen_q, a.seqlen_k, 8}, n))
    return fail(FLASHBOX_ERR_SIZE_OVERFLOW, "score matrix size batch = " + str(a.batch) +
                                                " x heads_q = " + str(a.heads_q) + " x seqlen_q = " + str(a.seqlen_q) +
                                                " x seqlen_k = " + str(a.seqlen_k) + " x 8 bytes overflows int64");
  return FLASHBOX_OK;
}

int validate_support(const flashbox_attention_args &a, bool /*backward: both passes have the same rules*/) {
  const std::string impl = impl_str(a.impl);
  if (a.device == FLASHBOX_CPU) {
    if (a.impl == FLASHBOX_FLASH)
      return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                  "impl = flash is not available on device = cpu (cpu has auto, naive, blocked)");
    if (a.head_dim > kCpuMaxHeadDim)
      return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim = " + str(a.head_dim) +
                                                         " is not supported on device = cpu (1.." +
                                                         str(kCpuMaxHeadDim) + ")");
    return FLASHBOX_OK;
  }
  if (a.impl == FLASHBOX_BLOCKED)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "impl = blocked is not available on device = cuda (cuda has auto, naive, flash)");
  if (a.dtype == FLASHBOX_FLOAT32)
    return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, "dtype = fp32 is not supported on device = cuda (fp16, bf16)");
  if (a.impl == FLASHBOX_NAIVE) {
    if (a.head_dim % 8 != 0 || a.head_dim > 256)
      return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim = " + str(a.head_dim) +
                                                         " is not supported by impl = naive on device = cuda "
                                                         "(multiples of 8 up to 256)");
  } else if (a.head_dim % 8 != 0 || a.head_dim > 256) {
    // The flash families: sm80 serves every multiple of 8 up to 256, forward and backward (the d64 /
    // d128 / d256 kernels with zero-filled columns); the sm90 forward too (the same instantiations,
    // the TMA filling the columns past head_dim with zeros), except varlen, softcap and ALiBi above
    // 128; the sm90 backward takes 64 and 128 and declines the rest to sm80.
    return fail(FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, "head_dim = " + str(a.head_dim) + " is not supported by impl = " +
                                                       impl + " on device = cuda (multiples of 8 up to 256)");
  }
  return FLASHBOX_OK;
}

int validate_tensor(const TensorDesc &t, flashbox_dtype dtype, flashbox_device device) {
  if (!t.ptr) return fail(FLASHBOX_ERR_NULL_POINTER, std::string(t.name) + " is NULL");
  for (int i = 0; i < 3; ++i)
    if (t.stride[i] <= 0)
      return fail(FLASHBOX_ERR_BAD_STRIDE, stride_arg(t, i) + " = " + str(t.stride[i]) + " must be > 0");
  int64_t bytes;
  if (!span_bytes(t, dtype, bytes))
    return fail(FLASHBOX_ERR_SIZE_OVERFLOW, "the extent of " + std::string(t.name) + " (strides " + str(t.stride[0]) +
                                                ", " + str(t.stride[1]) + ", " + str(t.stride[2]) +
                                                ") overflows int64");
  // Non-overlap: walk the dims with extent > 1 from the smallest stride up; each must step past
  // everything the smaller ones cover (head_dim contiguous elements to start with).
  int order[3] = {0, 1, 2};
  std::sort(order, order + 3, [&](int x, int y) { return t.stride[x] < t.stride[y]; });
  int64_t covered = t.head_dim;
  std::string covered_by = std::string(t.head_dim_name) + " = " + str(t.head_dim);
  for (int i : order) {
    if (extent(t, i) <= 1) continue;
    if (t.stride[i] < covered)
      return fail(FLASHBOX_ERR_BAD_STRIDE, stride_arg(t, i) + " = " + str(t.stride[i]) + " makes elements of " +
                                               t.name + " overlap: it must be >= " + str(covered) + " (" + covered_by +
                                               "; " + t.head_dim_name + " must be contiguous)");
    covered = t.stride[i] * extent(t, i);  // cannot overflow: bounded by the span checked above
    covered_by = stride_arg(t, i) + " x " + str(extent(t, i));
  }
  const auto addr = reinterpret_cast<uintptr_t>(t.ptr);
  const int64_t es = cpu::dtype_size(dtype);
  if (device == FLASHBOX_CUDA) {
    if (addr % 16 != 0)
      return fail(FLASHBOX_ERR_MISALIGNED, std::string(t.name) + " = " + ptr_str(t.ptr) +
                                               " is not 16-byte aligned (the CUDA kernels load 16 bytes at a time)");
    const int64_t per16 = 16 / es;
    for (int i = 0; i < 3; ++i)
      if (t.stride[i] % per16 != 0)
        return fail(FLASHBOX_ERR_MISALIGNED, stride_arg(t, i) + " = " + str(t.stride[i]) + " is not a multiple of " +
                                                 str(per16) + " elements (16 bytes), which the CUDA kernels need");
  } else if (addr % uint64_t(es) != 0) {
    return fail(FLASHBOX_ERR_MISALIGNED,
                std::string(t.name) + " = " + ptr_str(t.ptr) + " is not aligned to its " + str(es) + "-byte elements");
  }
  return FLASHBOX_OK;
}

int64_t tensor_span_bytes(const TensorDesc &t, flashbox_dtype dtype) {
  int64_t bytes = 0;
  span_bytes(t, dtype, bytes);
  return bytes;
}

// The byte set of a tensor (valid after validate_tensor) and of an lse-shaped fp32 buffer.
ByteView tensor_view(const TensorDesc &t, flashbox_dtype dtype) {
  const int64_t es = cpu::dtype_size(dtype);
  ByteView v;
  v.base = reinterpret_cast<uintptr_t>(t.ptr);
  v.run = t.head_dim * es;
  v.ndims = 3;
  // A dimension of extent 1 adds no offset, and its stride is bounded by nothing (validate_tensor's
  // span covers (extent - 1) * stride): any positive stride describes the same bytes, and one that
  // cannot overflow is taken (the API fuzzer found stride * element size past int64).
  for (int i = 0; i < 3; ++i) v.stride[i] = extent(t, i) > 1 ? t.stride[i] * es : v.run, v.extent[i] = extent(t, i);
  return v;
}

ByteView lse_view(const float *lse, const flashbox_attention_args &a) {
  ByteView v;
  v.base = reinterpret_cast<uintptr_t>(lse);
  v.run = lse_bytes(a);
  return v;
}

namespace {

// The refusal when two views share (or, past the search budget, may share) an element.
int overlap_failure(const OverlapAnswer &ans, const char *name, const void *ptr, const char *other,
                    const void *other_ptr) {
  const std::string what =
      std::string(name) + " = " + ptr_str(ptr) + " overlaps " + other + " = " + ptr_str(other_ptr) + " in memory";
  if (ans.exact)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, what +
                                                   ": they share elements (an output may not share an element "
                                                   "with an input or with another output)");
  return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
              what +
                  " as far as flashbox can tell: their strides are too unrelated for the exact element test "
                  "within " +
                  str(kOverlapSearchBudget) +
                  " steps, so the call is refused to be safe (pass "
                  "outputs in separate buffers)");
}

}  // namespace

int validate_disjoint(const TensorDesc &written, const TensorDesc &other, flashbox_dtype dtype) {
  return validate_disjoint(written, dtype, other, dtype);
}

int validate_disjoint(const TensorDesc &written, flashbox_dtype written_dtype, const TensorDesc &other,
                      flashbox_dtype other_dtype) {
  const OverlapAnswer ans = views_overlap(tensor_view(written, written_dtype), tensor_view(other, other_dtype));
  if (ans.overlap) return overlap_failure(ans, written.name, written.ptr, other.name, other.ptr);
  return FLASHBOX_OK;
}

int validate_lse(const float *lse, const char *name, const flashbox_attention_args &) {
  if (lse && reinterpret_cast<uintptr_t>(lse) % 4 != 0)
    return fail(FLASHBOX_ERR_MISALIGNED, std::string(name) + " = " + ptr_str(lse) + " is not 4-byte aligned");
  return FLASHBOX_OK;
}

int validate_lse_disjoint(const float *lse, const char *name, const flashbox_attention_args &a,
                          const TensorDesc &other) {
  return validate_lse_disjoint(lse, name, a, other, a.dtype);
}

int validate_lse_disjoint(const float *lse, const char *name, const flashbox_attention_args &a, const TensorDesc &other,
                          flashbox_dtype other_dtype) {
  if (!lse) return FLASHBOX_OK;
  const OverlapAnswer ans = views_overlap(lse_view(lse, a), tensor_view(other, other_dtype));
  if (ans.overlap) return overlap_failure(ans, name, lse, other.name, other.ptr);
  return FLASHBOX_OK;
}

int validate_device_available(flashbox_device device) {
  if (device != FLASHBOX_CUDA) return FLASHBOX_OK;
#ifdef FLASHBOX_HAVE_CUDA
  if (cuda_device_count() <= 0)
    return fail(FLASHBOX_ERR_NO_DEVICE, "device = cuda, but no CUDA device is visible to this process");
  return FLASHBOX_OK;
#else
  return fail(FLASHBOX_ERR_NO_DEVICE, "device = cuda, but this flashbox was built without CUDA");
#endif
}

int validate_device_pointer([[maybe_unused]] const void *ptr, [[maybe_unused]] const char *name,
                            flashbox_device device) {
  if (device != FLASHBOX_CUDA || !ptr) return FLASHBOX_OK;
#ifdef FLASHBOX_HAVE_CUDA
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();  // do not leave a sticky error for the caller's next CUDA call
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                std::string(name) + " = " + ptr_str(ptr) + " is not a CUDA pointer: " + cudaGetErrorString(err));
  }
  if (attr.type == cudaMemoryTypeUnregistered)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                std::string(name) + " = " + ptr_str(ptr) + " is host memory, but device = cuda needs device memory");
#endif
  return FLASHBOX_OK;
}

namespace {

// `wide`: the call `a` with o's dtype, which the scalar and support rules see (for an fp8 call the
// wider dtype, whose byte counts bound q's, k's and v's too, and one the plain rules know); q, k and v
// are checked with a.dtype. Enums are read only after validate_scalars has vouched for them.
int forward_checks(const flashbox_attention_args &a, const flashbox_attention_args &wide, int64_t head_dim_v) {
  if (int rc = validate_scalars(wide, head_dim_v)) return rc;
  if (int rc = validate_support(wide)) return rc;
  const flashbox_dtype out_dtype = wide.dtype;
  const TensorDesc q = tensor_q(a), k = tensor_k(a), v = tensor_v(a, head_dim_v), o = tensor_o(a, head_dim_v);
  for (const TensorDesc *t : {&q, &k, &v})
    if (int rc = validate_tensor(*t, a.dtype, a.device)) return rc;
  if (int rc = validate_tensor(o, out_dtype, a.device)) return rc;
  for (const TensorDesc *t : {&q, &k, &v})
    if (int rc = validate_disjoint(o, out_dtype, *t, a.dtype)) return rc;
  if (int rc = validate_lse(a.lse, "lse", a)) return rc;
  for (const TensorDesc *t : {&q, &k, &v})
    if (int rc = validate_lse_disjoint(a.lse, "lse", a, *t, a.dtype)) return rc;
  if (int rc = validate_lse_disjoint(a.lse, "lse", a, o, out_dtype)) return rc;
  if (int rc = validate_device_available(a.device)) return rc;
  for (const TensorDesc *t : {&q, &k, &v, &o})
    if (int rc = validate_device_pointer(t->ptr, t->name, a.device)) return rc;
  return validate_device_pointer(a.lse, "lse", a.device);
}

}  // namespace

int validate_forward_args(const flashbox_attention_args *args, int64_t head_dim_v) {
  if (!args) return fail(FLASHBOX_ERR_NULL_POINTER, "args is NULL");
  return forward_checks(*args, *args, head_dim_v);
}

int validate_forward_args(const flashbox_attention_args &a, int64_t head_dim_v, flashbox_dtype out_dtype) {
  flashbox_attention_args wide = a;
  wide.dtype = out_dtype;
  return forward_checks(a, wide, head_dim_v);
}

}  // namespace flashbox::detail
