// The mod entry points (include/flashbox/flashbox.h, "Mods"): flashbox_mod_create checks the
// declaration, chooses the architectures (the device's, or sm_80 and sm_90a without one), and has
// src/jit build it with the disk cache of src/api/options.cpp; flashbox_mod_get_info and _destroy
// read and free the handle. check_ext_mods checks a call's handles and tensors (mod_api.hpp).
#include "api/mod_api.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/arg_text.hpp"
#include "api/guarded_call.hpp"
#include "api/mask_mod_tiles.hpp"
#include "api/options.hpp"
#include "api/validate.hpp"
#include "core/enum_bits.hpp"
#include "core/error.hpp"
#include "jit/compiled_mod.hpp"
#include "jit/mod_build.hpp"
#ifdef FLASHBOX_HAVE_CUDA
#include "api/family_choice.hpp"
#endif

namespace flashbox::detail {
namespace {

constexpr size_t kMaxSource = size_t(1) << 20;
constexpr int32_t kDescSize = int32_t(sizeof(flashbox_mod_desc));

// The C++ keywords (and the alternative tokens) a member or function name may not be; the prelude's
// own names (fbx) are checked too, so that a declaration never produces a translation unit that
// fails for a reason the caller cannot see in their source.
constexpr std::string_view kReserved[] = {
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch",
    "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr",
    "constinit", "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete",
    "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for",
    "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
    "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register", "reinterpret_cast",
    "requires", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast", "struct",
    "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef", "typeid", "typename",
    "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "fbx"};

// A C identifier of at most jit::kMaxAuxName characters that is no keyword; "" when it is one, else why not.
std::string identifier_problem(const char *name) {
  if (!name) return "is NULL";
  const size_t n = std::strlen(name);
  if (n == 0 || n > size_t(jit::kMaxAuxName)) return "must have 1 to " + str(jit::kMaxAuxName) + " characters";
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(name[0])) return "= \"" + std::string(name) + "\" is not a C identifier";
  for (size_t i = 1; i < n; ++i)
    if (!alpha(name[i]) && !(name[i] >= '0' && name[i] <= '9'))
      return "= \"" + std::string(name) + "\" is not a C identifier";
  if (std::find(std::begin(kReserved), std::end(kReserved), std::string_view(name)) != std::end(kReserved))
    return "= \"" + std::string(name) + "\" is a C++ keyword or a name of the prelude";
  return "";
}

// Enums the caller wrote are read as ints (core::enum_bits): a value outside the C++ enum's range is
// undefined behaviour to load as the enum.
bool valid_aux_dtype(const flashbox_aux_dtype &d) {
  const int v = core::enum_bits(d);
  return v >= FLASHBOX_AUX_INT32 && v <= FLASHBOX_AUX_BFLOAT16;
}

int64_t aux_element_bytes(flashbox_aux_dtype d) {
  switch (d) {
    case FLASHBOX_AUX_INT64: return 8;
    case FLASHBOX_AUX_INT32:
    case FLASHBOX_AUX_FLOAT32: return 4;
    case FLASHBOX_AUX_FLOAT16:
    case FLASHBOX_AUX_BFLOAT16: return 2;
    case FLASHBOX_AUX_UINT8: return 1;
  }
  return 0;
}

const char *aux_dtype_name(const flashbox_aux_dtype &d) {
  static const char *const names[] = {"int32", "int64", "uint8", "float32", "float16", "bfloat16"};
  return valid_aux_dtype(d) ? names[core::enum_bits(d)] : "?";
}

// The declaration into a ModSpec, every field checked.
int read_desc(const flashbox_mod_desc &d, jit::ModSpec &spec) {
  if (d.struct_size != kDescSize)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "desc->struct_size = " + str(d.struct_size) + " must be " +
                                                   str(kDescSize) + " (sizeof(flashbox_mod_desc))");
  const int kind = core::enum_bits(d.kind);
  if (kind != FLASHBOX_MOD_MASK && kind != FLASHBOX_MOD_SCORE)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                "desc->kind = " + str(kind) + " must be FLASHBOX_MOD_MASK (1) or FLASHBOX_MOD_SCORE (2)");
  if (!d.source) return fail(FLASHBOX_ERR_NULL_POINTER, "desc->source is NULL");
  const size_t length = strnlen(d.source, kMaxSource + 1);
  if (length > kMaxSource)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "desc->source is longer than " + str(int64_t(kMaxSource)) + " bytes");
  if (!d.function_name) return fail(FLASHBOX_ERR_NULL_POINTER, "desc->function_name is NULL");
  if (std::string why = identifier_problem(d.function_name); !why.empty())
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "desc->function_name " + why);
  if (d.num_aux < 0 || d.num_aux > FLASHBOX_MOD_MAX_AUX)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "desc->num_aux = " + str(d.num_aux) + " must be within 0.." +
                                                   str(FLASHBOX_MOD_MAX_AUX) + " (FLASHBOX_MOD_MAX_AUX)");
  if (d.num_aux > 0 && !d.aux)
    return fail(FLASHBOX_ERR_NULL_POINTER, "desc->aux is NULL but desc->num_aux = " + str(d.num_aux));
  spec = jit::ModSpec{};
  spec.kind = d.kind;
  spec.source.assign(d.source, length);
  spec.function_name = d.function_name;
  for (int32_t i = 0; i < d.num_aux; ++i) {
    const flashbox_aux_decl &a = d.aux[i];
    const std::string which = "desc->aux[" + str(i) + "]";
    if (std::string why = identifier_problem(a.name); !why.empty())
      return fail(a.name ? FLASHBOX_ERR_INVALID_ARGUMENT : FLASHBOX_ERR_NULL_POINTER, which + ".name " + why);
    if (a.name == spec.function_name)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, which + ".name = \"" + a.name + "\" is the function's name");
    for (const jit::AuxDecl &prev : spec.aux)
      if (std::strcmp(prev.name, a.name) == 0)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT, which + ".name = \"" + a.name + "\" is declared twice");
    if (!valid_aux_dtype(a.dtype))
      return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, which + ".dtype = " + str(core::enum_bits(a.dtype)) +
                                                      " is not a flashbox_aux_dtype (0..5)");
    if (a.rank < 1 || a.rank > FLASHBOX_AUX_MAX_RANK)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, which + ".rank = " + str(a.rank) + " must be within 1.." +
                                                     str(FLASHBOX_AUX_MAX_RANK) + " (FLASHBOX_AUX_MAX_RANK)");
    jit::AuxDecl decl{};
    std::memcpy(decl.name, a.name, std::strlen(a.name) + 1);  // at most kMaxAuxName: identifier_problem
    decl.dtype = a.dtype, decl.rank = a.rank;
    spec.aux.push_back(decl);
  }
  return FLASHBOX_OK;
}

// arch 0: the current device's compute capability (9.x: 90, compiled as sm_90a), or 80 and 90 when
// there is no device to ask; else the caller's, which must be at least 80 (the kernel families' floor).
int choose_archs(int32_t arch, std::vector<int> &archs) {
  archs.clear();
  if (arch != 0) {
    if (arch < 80)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "desc->arch = " + str(arch) +
                                                     ": flashbox's CUDA kernels need compute capability 8.0 or "
                                                     "later (arch >= 80; 0: the device's)");
    archs.push_back(arch);
    return FLASHBOX_OK;
  }
#ifdef FLASHBOX_HAVE_CUDA
  if (flashbox_cuda_device_count() > 0) {
    int cc = 0;
    if (int rc = current_compute_capability(cc)) return rc;
    archs.push_back(cc / 10 == 9 ? 90 : cc);
    return FLASHBOX_OK;
  }
#endif
  archs = {80, 90};
  return FLASHBOX_OK;
}

const flashbox_mod_s *live(flashbox_mod mod) { return mod && mod->magic == flashbox_mod_s::kLive ? mod : nullptr; }

// One mod field of an attention call: the handle, its kind, and its tensors against its declaration.
int check_binding(const flashbox_attention_args &a, flashbox_mod mod, const flashbox_aux_tensor *aux,
                  const char *field, flashbox_mod_kind kind) {
  const std::string aux_field = std::string(field) + "_aux";
  if (!mod) {
    if (aux) return fail(FLASHBOX_ERR_INVALID_ARGUMENT, aux_field + " is set but " + field + " is NULL");
    return FLASHBOX_OK;
  }
  const flashbox_mod_s *m = live(mod);
  if (!m)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                std::string(field) + " is not a live flashbox_mod (destroyed, or not made by flashbox_mod_create)");
  const jit::ModSpec &spec = m->mod.spec;
  if (spec.kind != kind)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(field) + " = " + spec.function_name + " is a " +
                                                   (spec.kind == FLASHBOX_MOD_MASK ? "mask" : "score") + " mod");
  if (spec.aux.empty() && aux)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, aux_field + " is set but " + field + " declares no aux tensor");
  if (!spec.aux.empty() && !aux)
    return fail(FLASHBOX_ERR_NULL_POINTER, aux_field + " is NULL but " + field + " declares " +
                                               str(int64_t(spec.aux.size())) + " aux tensor(s)");
  for (size_t i = 0; i < spec.aux.size(); ++i) {
    const flashbox_aux_tensor &t = aux[i];
    const jit::AuxDecl &d = spec.aux[i];
    const std::string which = aux_field + "[" + str(int64_t(i)) + "] (" + d.name + ")";
    if (!valid_aux_dtype(t.dtype))
      return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                  which + ".dtype = " + str(core::enum_bits(t.dtype)) + " is not a flashbox_aux_dtype (0..5)");
    if (t.dtype != d.dtype)
      return fail(FLASHBOX_ERR_UNSUPPORTED_DTYPE, which + ".dtype = " + aux_dtype_name(t.dtype) + " but " + field +
                                                      " declares " + aux_dtype_name(d.dtype));
    if (t.rank < 1 || t.rank > FLASHBOX_AUX_MAX_RANK)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, which + ".rank = " + str(t.rank) + " must be within 1.." +
                                                     str(FLASHBOX_AUX_MAX_RANK));
    if (t.rank != d.rank)
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                  which + ".rank = " + str(t.rank) + " but " + field + " declares rank " + str(d.rank));
    __int128 elements = 1, last = 0;  // element count and the largest offset (elements)
    for (int r = 0; r < t.rank; ++r) {
      if (t.sizes[r] < 0)
        return fail(FLASHBOX_ERR_INVALID_SIZE, which + ".sizes[" + str(r) + "] = " + str(t.sizes[r]) + " must be >= 0");
      if (t.strides[r] < 0)
        return fail(FLASHBOX_ERR_BAD_STRIDE,
                    which + ".strides[" + str(r) + "] = " + str(t.strides[r]) + " must be >= 0 (0 broadcasts)");
      elements *= t.sizes[r];
      if (t.sizes[r] > 0) last += __int128(t.sizes[r] - 1) * t.strides[r];
      if (elements > __int128(INT64_MAX) || (last + 1) * aux_element_bytes(t.dtype) > __int128(INT64_MAX))
        return fail(FLASHBOX_ERR_SIZE_OVERFLOW, which + ": its sizes and strides overflow int64 bytes");
    }
    if (elements > 0 && !t.data)
      return fail(FLASHBOX_ERR_NULL_POINTER, which + ".data is NULL but the tensor holds " +
                                                 str(int64_t(elements)) + " element(s)");
    if (reinterpret_cast<uintptr_t>(t.data) % uintptr_t(aux_element_bytes(t.dtype)) != 0)
      return fail(FLASHBOX_ERR_MISALIGNED, which + ".data is not aligned to its " +
                                               str(aux_element_bytes(t.dtype)) + "-byte elements");
    if (core::enum_bits(t.device) != core::enum_bits(a.device))
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, which + ".device = " + device_name(core::enum_bits(t.device)) +
                                                     " but the call runs on device = " +
                                                     device_name(core::enum_bits(a.device)));
    if (int rc = validate_device_pointer(t.data, which.c_str(), a.device)) return rc;
  }
  return FLASHBOX_OK;
}

}  // namespace

int check_ext_mods(const flashbox_attention_args &a, const flashbox_attention_ext &e) {
  if (int rc = check_binding(a, e.mask_mod, e.mask_mod_aux, "mask_mod", FLASHBOX_MOD_MASK)) return rc;
  if (int rc = check_binding(a, e.score_mod, e.score_mod_aux, "score_mod", FLASHBOX_MOD_SCORE)) return rc;
  if (e.mask_mod_broadcast != 0 && !e.mask_mod)
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "mask_mod_broadcast = " + str(e.mask_mod_broadcast) +
                                                   " is set but mask_mod is NULL (pass 0 without a mask mod)");
  if (e.mask_mod_broadcast & ~(FLASHBOX_MOD_SAME_BATCH | FLASHBOX_MOD_SAME_HEADS))
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "mask_mod_broadcast = " + str(e.mask_mod_broadcast) +
                                                   " must be a combination of FLASHBOX_MOD_SAME_BATCH (1) and "
                                                   "FLASHBOX_MOD_SAME_HEADS (2)");
  if (!e.mask_mod && !e.score_mod) return FLASHBOX_OK;
  const std::string field = e.mask_mod ? "mask_mod" : "score_mod";
  if (a.device == FLASHBOX_CPU)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                field + ": device = cpu does not run mods (a mod is CUDA device code, compiled by NVRTC)");
  if (e.score_mod)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "score_mod: no CUDA kernel applies a score mod yet (mask_mod runs in the mask-family kernels; "
                "softcap and ALiBi are fields of their own)");
  if (e.cu_seqlens_q || e.cu_seqlens_k)
    return fail(FLASHBOX_ERR_UNSUPPORTED_IMPL,
                "mask_mod with cu_seqlens: mask mods take fixed-length calls (their bits live in block-mask "
                "blocks; pad the sequences, or use document_ids for packed ones)");
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail

using namespace flashbox::detail;

extern "C" {

FLASHBOX_API int flashbox_mod_create(const flashbox_mod_desc *desc, flashbox_mod *out) {
  return guarded_call("flashbox_mod_create", [&]() -> int {
    if (!out) return fail(FLASHBOX_ERR_NULL_POINTER, "out is NULL");
    *out = nullptr;
    if (!desc) return fail(FLASHBOX_ERR_NULL_POINTER, "desc is NULL");
    flashbox::jit::ModSpec spec;
    if (int rc = read_desc(*desc, spec)) return rc;
    std::vector<int> archs;
    if (int rc = choose_archs(desc->arch, archs)) return rc;
    auto handle = std::make_unique<flashbox_mod_s>();
    if (int rc = flashbox::jit::build_mod(spec, archs, mod_cache_dir(), handle->mod)) return rc;
    *out = handle.release();
    return FLASHBOX_OK;
  });
}

FLASHBOX_API void flashbox_mod_destroy(flashbox_mod mod) {
  if (!live(mod)) return;
  unload_mod_libraries(*mod);
  mod->magic = flashbox_mod_s::kDead;
  delete mod;
}

FLASHBOX_API int flashbox_mod_get_info(flashbox_mod mod, flashbox_mod_info *info) {
  return guarded_call("flashbox_mod_get_info", [&]() -> int {
    if (!info) return fail(FLASHBOX_ERR_NULL_POINTER, "info is NULL");
    if (info->struct_size != int32_t(sizeof(flashbox_mod_info)))
      return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "info->struct_size = " + str(info->struct_size) + " must be " +
                                                     str(int64_t(sizeof(flashbox_mod_info))));
    const flashbox_mod_s *m = live(mod);
    if (!m) return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "mod is not a live flashbox_mod");
    const flashbox::jit::CompiledMod &c = m->mod;
    *info = flashbox_mod_info{};
    info->struct_size = int32_t(sizeof(flashbox_mod_info));
    info->from_cache = std::all_of(c.cubins.begin(), c.cubins.end(), [](const auto &b) { return b.from_cache; });
    info->cached = c.cached;
    info->num_archs = int32_t(std::min<size_t>(c.cubins.size(), 4));
    for (int i = 0; i < info->num_archs; ++i)
      info->archs[i] = c.cubins[size_t(i)].arch, info->cubin_bytes[i] = int64_t(c.cubins[size_t(i)].image.size());
    info->seconds = c.seconds;
    if (!c.cubins.empty()) std::memcpy(info->key, c.cubins[0].key.c_str(), 65);
    return FLASHBOX_OK;
  });
}

}  // extern "C"
