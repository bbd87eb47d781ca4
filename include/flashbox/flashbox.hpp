// flashbox C++ layer: a thin, header-only convenience over the C API in flashbox.h. Errors become
// flashbox::Error exceptions (code + message); tensors are described by TensorView (pointer, dtype,
// [batch, seq, heads, head_dim] sizes and element strides). Everything still goes through
// flashbox_attention_forward, so validation and dispatch are the C API's.
//
//   auto q = flashbox::TensorView::bthd(q_ptr, FLASHBOX_BFLOAT16, B, T, H, D);  // likewise k, v, o
//   flashbox::attention_forward(q, k, v, o, {.impl = FLASHBOX_BLOCKED, .causal = true});
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flashbox/flashbox.h"

namespace flashbox {

// Symbolic name of an error code, e.g. "FLASHBOX_ERR_BAD_STRIDE".
inline const char *error_code_name(int code) {
  switch (code) {
    case FLASHBOX_OK: return "FLASHBOX_OK";
    case FLASHBOX_ERR_NULL_POINTER: return "FLASHBOX_ERR_NULL_POINTER";
    case FLASHBOX_ERR_INVALID_SIZE: return "FLASHBOX_ERR_INVALID_SIZE";
    case FLASHBOX_ERR_SIZE_OVERFLOW: return "FLASHBOX_ERR_SIZE_OVERFLOW";
    case FLASHBOX_ERR_HEADS_MISMATCH: return "FLASHBOX_ERR_HEADS_MISMATCH";
    case FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM: return "FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM";
    case FLASHBOX_ERR_UNSUPPORTED_DTYPE: return "FLASHBOX_ERR_UNSUPPORTED_DTYPE";
    case FLASHBOX_ERR_UNSUPPORTED_IMPL: return "FLASHBOX_ERR_UNSUPPORTED_IMPL";
    case FLASHBOX_ERR_BAD_STRIDE: return "FLASHBOX_ERR_BAD_STRIDE";
    case FLASHBOX_ERR_MISALIGNED: return "FLASHBOX_ERR_MISALIGNED";
    case FLASHBOX_ERR_NO_DEVICE: return "FLASHBOX_ERR_NO_DEVICE";
    case FLASHBOX_ERR_OUT_OF_MEMORY: return "FLASHBOX_ERR_OUT_OF_MEMORY";
    case FLASHBOX_ERR_CUDA: return "FLASHBOX_ERR_CUDA";
    case FLASHBOX_ERR_INVALID_ARGUMENT: return "FLASHBOX_ERR_INVALID_ARGUMENT";
    case FLASHBOX_ERR_INTERNAL: return "FLASHBOX_ERR_INTERNAL";
  }
  return "FLASHBOX_ERR_UNKNOWN";
}

// A failed flashbox call: the C API's code and the message naming the argument and its value.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string &message)
      : std::runtime_error(std::string(error_code_name(code)) + ": " + message), code_(code), message_(message) {}
  int code() const noexcept { return code_; }
  const std::string &message() const noexcept { return message_; }  // without the code name

 private:
  int code_;
  std::string message_;
};

// Throws Error for a non-zero return code of a C API call made on this thread.
inline void check(int code) {
  if (code != FLASHBOX_OK) throw Error(code, flashbox_last_error());
}

inline const char *dtype_name(flashbox_dtype t) {
  switch (t) {
    case FLASHBOX_FLOAT32: return "fp32";
    case FLASHBOX_FLOAT16: return "fp16";
    case FLASHBOX_BFLOAT16: return "bf16";
    case FLASHBOX_FLOAT8_E4M3: return "fp8_e4m3";
  }
  return "unknown";
}

inline int64_t dtype_size(flashbox_dtype t) { return t == FLASHBOX_FLOAT32 ? 4 : t == FLASHBOX_FLOAT8_E4M3 ? 1 : 2; }

inline const char *device_name(flashbox_device d) {
  switch (d) {
    case FLASHBOX_CPU: return "cpu";
    case FLASHBOX_CUDA: return "cuda";
  }
  return "unknown";
}

inline const char *impl_name(flashbox_impl i) { return flashbox_impl_name(i); }

// Parsers for command lines and config files; nullopt for an unknown name.
inline std::optional<flashbox_dtype> parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "float32" || s == "float") return FLASHBOX_FLOAT32;
  if (s == "fp16" || s == "float16" || s == "half") return FLASHBOX_FLOAT16;
  if (s == "bf16" || s == "bfloat16") return FLASHBOX_BFLOAT16;
  return std::nullopt;
}

inline std::optional<flashbox_device> parse_device(std::string_view s) {
  if (s == "cpu") return FLASHBOX_CPU;
  if (s == "cuda" || s == "gpu") return FLASHBOX_CUDA;
  return std::nullopt;
}

inline std::optional<flashbox_impl> parse_impl(std::string_view s) {
  for (flashbox_impl i : {FLASHBOX_AUTO, FLASHBOX_NAIVE, FLASHBOX_BLOCKED, FLASHBOX_FLASH})
    if (s == flashbox_impl_name(i)) return i;
  return std::nullopt;
}

// A [batch, seq, heads, head_dim] tensor with a contiguous head_dim. `data` is not owned. Inputs
// (q, k, v) are only read by the library; the view holds a non-const pointer so one type serves both.
struct TensorView {
  void *data = nullptr;
  flashbox_dtype dtype = FLASHBOX_FLOAT32;
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  int64_t stride[3] = {0, 0, 0};  // batch, seq, head (elements)

  // Dense [batch, seq, heads, head_dim] (PyTorch's (B, T, H, D) contiguous).
  static TensorView bthd(const void *data, flashbox_dtype t, int64_t b, int64_t s, int64_t h, int64_t d) {
    return {const_cast<void *>(data), t, b, s, h, d, {s * h * d, h * d, d}};
  }
  // Dense [batch, heads, seq, head_dim] (PyTorch's (B, H, T, D) contiguous).
  static TensorView bhtd(const void *data, flashbox_dtype t, int64_t b, int64_t s, int64_t h, int64_t d) {
    return {const_cast<void *>(data), t, b, s, h, d, {h * s * d, d, s * d}};
  }
  int64_t elements() const { return batch * seq * heads * head_dim; }
};

struct AttentionOptions {
  flashbox_device device = FLASHBOX_CPU;
  flashbox_impl impl = FLASHBOX_AUTO;
  bool causal = false;
  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim)
  float *lse = nullptr;        // optional [batch, heads_q, seqlen_q] fp32 output
  void *stream = nullptr;      // cudaStream_t for FLASHBOX_CUDA
  // Kernel family and SM margin (flashbox_options); null: the library's own choice.
  const flashbox_options *kernel = nullptr;
};

// Default options with a kernel family, e.g. kernel_options(FLASHBOX_FAMILY_SM80).
inline flashbox_options kernel_options(flashbox_kernel_family family = FLASHBOX_FAMILY_AUTO) {
  flashbox_options o;
  flashbox_options_init(&o);
  o.family = family;
  return o;
}

// The C arguments for q, k, v -> o. Throws Error when the views disagree with each other (dtype,
// batch, head_dim, k/v shapes, o/q shapes); everything else is the C API's to check.
inline flashbox_attention_args make_attention_args(const TensorView &q, const TensorView &k, const TensorView &v,
                                                   const TensorView &o, const AttentionOptions &opt = {}) {
  auto mismatch = [](const char *what, const char *name, int64_t got, int64_t want) {
    throw Error(FLASHBOX_ERR_INVALID_SIZE, std::string(name) + "." + what + " = " + std::to_string(got) +
                                               " does not match " + std::to_string(want));
  };
  for (auto [name, t] : {std::pair{"k", &k}, std::pair{"v", &v}, std::pair{"o", &o}}) {
    if (t->dtype != q.dtype)
      throw Error(FLASHBOX_ERR_UNSUPPORTED_DTYPE, std::string(name) + ".dtype = " + dtype_name(t->dtype) +
                                                      " differs from q.dtype = " + dtype_name(q.dtype));
    if (t->batch != q.batch) mismatch("batch", name, t->batch, q.batch);
    if (t->head_dim != q.head_dim) mismatch("head_dim", name, t->head_dim, q.head_dim);
  }
  if (v.seq != k.seq) mismatch("seq", "v", v.seq, k.seq);
  if (v.heads != k.heads) mismatch("heads", "v", v.heads, k.heads);
  if (o.seq != q.seq) mismatch("seq", "o", o.seq, q.seq);
  if (o.heads != q.heads) mismatch("heads", "o", o.heads, q.heads);

  flashbox_attention_args a{};
  a.device = opt.device, a.dtype = q.dtype, a.impl = opt.impl;
  a.batch = q.batch, a.seqlen_q = q.seq, a.seqlen_k = k.seq;
  a.heads_q = q.heads, a.heads_kv = k.heads, a.head_dim = q.head_dim;
  a.q = q.data, a.k = k.data, a.v = v.data, a.o = o.data, a.lse = opt.lse;
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = q.stride[i], a.k_stride[i] = k.stride[i];
    a.v_stride[i] = v.stride[i], a.o_stride[i] = o.stride[i];
  }
  a.softmax_scale = opt.softmax_scale;
  a.causal = opt.causal ? 1 : 0;
  a.stream = opt.stream;
  return a;
}

// o = softmax(q k^T * scale [+ causal mask]) v. Throws Error on any failure.
inline void attention_forward(const TensorView &q, const TensorView &k, const TensorView &v, const TensorView &o,
                              const AttentionOptions &opt = {}) {
  const flashbox_attention_args a = make_attention_args(q, k, v, o, opt);
  check(flashbox_attention_forward_opts(&a, opt.kernel));
}

inline void attention_forward(const flashbox_attention_args &a) { check(flashbox_attention_forward(&a)); }

// What the last successful call on this thread ran and how much scratch memory it allocated.
struct CallInfo {
  std::string kernel;
  int64_t scratch_peak_bytes = 0;
};
inline CallInfo last_call() { return {flashbox_last_kernel(), flashbox_last_scratch_peak_bytes()}; }

// A compiled mask or score mod (flashbox.h, "Mods"), destroyed with the object; move-only. The
// constructor compiles (or reads the disk cache) and throws Error with the compiler's message.
//   flashbox::Mod doc(FLASHBOX_MOD_MASK, source, "doc_causal", {{"doc", FLASHBOX_AUX_INT32, 2}});
//   ext.mask_mod = doc.get();
class Mod {
 public:
  Mod(flashbox_mod_kind kind, const std::string &source, const std::string &function_name,
      const std::vector<flashbox_aux_decl> &aux = {}, int32_t arch = 0) {
    flashbox_mod_desc d{};
    d.struct_size = sizeof d;
    d.kind = kind;
    d.source = source.c_str();
    d.function_name = function_name.c_str();
    d.num_aux = int32_t(aux.size());
    d.aux = aux.empty() ? nullptr : aux.data();
    d.arch = arch;
    check(flashbox_mod_create(&d, &mod_));
  }
  Mod(Mod &&other) noexcept : mod_(std::exchange(other.mod_, nullptr)) {}
  Mod &operator=(Mod &&other) noexcept {
    if (this != &other) flashbox_mod_destroy(std::exchange(mod_, std::exchange(other.mod_, nullptr)));
    return *this;
  }
  Mod(const Mod &) = delete;
  Mod &operator=(const Mod &) = delete;
  ~Mod() { flashbox_mod_destroy(mod_); }
  flashbox_mod get() const noexcept { return mod_; }
  flashbox_mod_info info() const {
    flashbox_mod_info i{};
    i.struct_size = sizeof i;
    check(flashbox_mod_get_info(mod_, &i));
    return i;
  }

 private:
  flashbox_mod mod_ = nullptr;
};

inline std::string version() { return flashbox_version(); }
inline int cuda_device_count() { return flashbox_cuda_device_count(); }

}  // namespace flashbox
