// Mods in the C API without compiling anything: flashbox_mod_create refuses malformed declarations
// (each field with its code and a message naming it) before NVRTC is involved, and an attention call
// given a mask_mod or score_mod checks the handle and its aux tensors against the declaration; the
// cpu refuses every mod and cuda every score mod with FLASHBOX_ERR_UNSUPPORTED_IMPL naming the field,
// nothing written.
// The handles here are made in the test from the library's own struct (src/jit/compiled_mod.hpp), so
// these run in every build, NVRTC or not (the CPU-only sanitizer build among them).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "flashbox/flashbox.hpp"
#include "jit/compiled_mod.hpp"
#include "support/mask_case.hpp"

using flashbox::test::expect_call_refused;
using flashbox::test::MaskCase;
using flashbox::test::MaskData;

namespace {

const char kMask[] = "bool m(int b, int h, int q, int kv) { return kv <= q; }";

flashbox_mod_desc mask_desc() {
  flashbox_mod_desc d{};
  d.struct_size = sizeof d;
  d.kind = FLASHBOX_MOD_MASK;
  d.source = kMask;
  d.function_name = "m";
  return d;
}

void expect_create_refused(const flashbox_mod_desc *d, int code, const std::string &mention) {
  flashbox_mod mod = reinterpret_cast<flashbox_mod>(uintptr_t(1));  // create must set it to NULL
  EXPECT_EQ(flashbox_mod_create(d, &mod), code) << flashbox_last_error();
  EXPECT_EQ(mod, nullptr);
  EXPECT_NE(std::string(flashbox_last_error()).find(mention), std::string::npos)
      << "'" << mention << "' not in: " << flashbox_last_error();
}

TEST(ModDesc, MalformedDeclarationsAreRefusedByName) {
  flashbox_mod mod = nullptr;
  EXPECT_EQ(flashbox_mod_create(nullptr, &mod), FLASHBOX_ERR_NULL_POINTER);
  flashbox_mod_desc d = mask_desc();
  EXPECT_EQ(flashbox_mod_create(&d, nullptr), FLASHBOX_ERR_NULL_POINTER);
  flashbox_aux_decl aux[2] = {{"doc", FLASHBOX_AUX_INT32, 2}, {"bias", FLASHBOX_AUX_FLOAT32, 1}};
  struct Case {
    const char *what;
    std::function<void(flashbox_mod_desc &, flashbox_aux_decl *)> edit;
    int code;
    const char *mention;
  };
  const Case cases[] = {
      {"struct_size", [](auto &x, auto *) { x.struct_size = 8; }, FLASHBOX_ERR_INVALID_ARGUMENT, "struct_size = 8"},
      {"kind", [](auto &x, auto *) { x.kind = flashbox_mod_kind(0); }, FLASHBOX_ERR_INVALID_ARGUMENT, "kind = 0"},
      {"source", [](auto &x, auto *) { x.source = nullptr; }, FLASHBOX_ERR_NULL_POINTER, "source"},
      {"function_name NULL", [](auto &x, auto *) { x.function_name = nullptr; }, FLASHBOX_ERR_NULL_POINTER,
       "function_name"},
      {"function_name", [](auto &x, auto *) { x.function_name = "1m"; }, FLASHBOX_ERR_INVALID_ARGUMENT,
       "\"1m\" is not a C identifier"},
      {"function_name keyword", [](auto &x, auto *) { x.function_name = "float"; }, FLASHBOX_ERR_INVALID_ARGUMENT,
       "keyword"},
      {"num_aux", [](auto &x, auto *) { x.num_aux = FLASHBOX_MOD_MAX_AUX + 1; }, FLASHBOX_ERR_INVALID_ARGUMENT,
       "num_aux = 9"},
      {"aux NULL", [](auto &x, auto *) { x.num_aux = 1; }, FLASHBOX_ERR_NULL_POINTER, "desc->aux is NULL"},
      {"aux rank > 4", [](auto &x, auto *a) { x.num_aux = 2, x.aux = a, a[1].rank = 5; },
       FLASHBOX_ERR_INVALID_ARGUMENT, "desc->aux[1].rank = 5"},
      {"aux rank 0", [](auto &x, auto *a) { x.num_aux = 2, x.aux = a, a[0].rank = 0; },
       FLASHBOX_ERR_INVALID_ARGUMENT, "desc->aux[0].rank = 0"},
      {"aux dtype", [](auto &x, auto *a) { x.num_aux = 2, x.aux = a, flashbox::test::store_int(a[1].dtype, 17); },
       FLASHBOX_ERR_UNSUPPORTED_DTYPE, "desc->aux[1].dtype = 17"},
      {"aux name", [](auto &x, auto *a) { x.num_aux = 2, x.aux = a, a[0].name = "doc ids"; },
       FLASHBOX_ERR_INVALID_ARGUMENT, "desc->aux[0].name"},
      {"aux name twice", [](auto &x, auto *a) { x.num_aux = 2, x.aux = a, a[1].name = "doc"; },
       FLASHBOX_ERR_INVALID_ARGUMENT, "declared twice"},
      {"aux named as the function", [](auto &x, auto *a) { x.num_aux = 2, x.aux = a, a[1].name = "m"; },
       FLASHBOX_ERR_INVALID_ARGUMENT, "the function's name"},
      {"arch", [](auto &x, auto *) { x.arch = 75; }, FLASHBOX_ERR_INVALID_ARGUMENT, "arch = 75"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    flashbox_mod_desc x = mask_desc();
    flashbox_aux_decl a[2] = {aux[0], aux[1]};
    c.edit(x, a);
    expect_create_refused(&x, c.code, c.mention);
  }
}

// The C++ layer's Mod throws the create's error: the compiler's message with NVRTC, the refusal
// without it.
TEST(ModDesc, CppLayerThrowsTheError) {
  try {
    flashbox::Mod bad(FLASHBOX_MOD_MASK, "bool m(int b, int h, int q, int kv) { return q < ; }", "m");
    FAIL() << "a mod that does not compile was created";
  } catch (const flashbox::Error &e) {
#ifdef FLASHBOX_HAVE_NVRTC
    EXPECT_EQ(e.code(), FLASHBOX_ERR_INVALID_ARGUMENT);
    EXPECT_NE(e.message().find("mod.cu(1): error"), std::string::npos) << e.message();
#else
    EXPECT_EQ(e.code(), FLASHBOX_ERR_UNSUPPORTED_IMPL);
#endif
  }
}

#ifndef FLASHBOX_HAVE_NVRTC
TEST(ModDesc, RefusedCleanlyWithoutNvrtc) {
  const flashbox_mod_desc d = mask_desc();
  expect_create_refused(&d, FLASHBOX_ERR_UNSUPPORTED_IMPL, "built without the CUDA toolkit's NVRTC");
}
#endif

// A live handle as flashbox_mod_create would leave it, without compiling: the attention calls read
// only its declaration.
struct FakeMod {
  flashbox_mod_s handle;
  FakeMod(flashbox_mod_kind kind, std::vector<flashbox::jit::AuxDecl> aux) {
    handle.mod.spec.kind = kind;
    handle.mod.spec.function_name = kind == FLASHBOX_MOD_MASK ? "m" : "s";
    handle.mod.spec.aux = std::move(aux);
  }
  flashbox_mod get() { return &handle; }
};

flashbox_aux_tensor aux_tensor(const void *data, flashbox_aux_dtype dtype, std::vector<int64_t> sizes,
                               flashbox_device device = FLASHBOX_CPU) {
  flashbox_aux_tensor t{};
  t.data = data, t.dtype = dtype, t.rank = int32_t(sizes.size()), t.device = device;
  int64_t stride = 1;
  for (int r = t.rank - 1; r >= 0; --r) t.sizes[r] = sizes[size_t(r)], t.strides[r] = stride, stride *= sizes[size_t(r)];
  return t;
}

MaskCase small_case() {
  MaskCase c;
  c.batch = 1, c.seqlen_q = 8, c.seqlen_k = 8, c.heads_q = 2, c.heads_kv = 1, c.head_dim = 8;
  return c;
}

// Forward and backward, on `device`, refuse the extension `edit` makes with `code`, naming `mentions`.
void expect_ext_refused(MaskData &d, flashbox_device device, const std::function<void(flashbox_attention_ext &)> &edit,
                        int code, const std::vector<std::string> &mentions) {
  flashbox_attention_ext e = d.ext();
  edit(e);
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  flashbox_attention_grad_args g = d.grad_args(FLASHBOX_BLOCKED);
  a.device = g.fwd.device = device;
  SCOPED_TRACE(device == FLASHBOX_CPU ? "cpu" : "cuda");
  expect_call_refused(d, [&] { return flashbox_attention_forward_ext(&a, &e); }, code, mentions);
  expect_call_refused(d, [&] { return flashbox_attention_backward_ext(&g, &e); }, code, mentions);
}

// The cpu runs no mod; a score mod runs nowhere yet; a mask mod on cuda takes fixed-length calls
// only, and mask_mod_broadcast only with a mask mod and its two flags. (A mask mod on cuda that passes
// these runs: tests/cuda/mask_mod_sm80_test.cpp.)
TEST(ModExt, RefusalsNameTheField) {
  MaskData d(small_case());
  FakeMod mask(FLASHBOX_MOD_MASK, {}), score(FLASHBOX_MOD_SCORE, {});
  const int unsupported = FLASHBOX_ERR_UNSUPPORTED_IMPL, bad = FLASHBOX_ERR_INVALID_ARGUMENT;
  expect_ext_refused(d, FLASHBOX_CPU, [&](auto &e) { e.mask_mod = mask.get(); }, unsupported,
                     {"mask_mod", "device = cpu does not run mods"});
  expect_ext_refused(d, FLASHBOX_CPU, [&](auto &e) { e.score_mod = score.get(); }, unsupported,
                     {"score_mod", "device = cpu does not run mods"});
  expect_ext_refused(d, FLASHBOX_CUDA, [&](auto &e) { e.score_mod = score.get(); }, unsupported,
                     {"score_mod", "no CUDA kernel applies a score mod"});
  expect_ext_refused(d, FLASHBOX_CUDA, [&](auto &e) { e.mask_mod = mask.get(), e.score_mod = score.get(); },
                     unsupported, {"score_mod"});
  const int32_t cu[2] = {0, 8};
  expect_ext_refused(
      d, FLASHBOX_CUDA,
      [&](auto &e) { e.mask_mod = mask.get(), e.cu_seqlens_q = e.cu_seqlens_k = cu, e.max_seqlen_q = e.max_seqlen_k = 8; },
      unsupported, {"mask_mod with cu_seqlens"});
  for (flashbox_device device : {FLASHBOX_CPU, FLASHBOX_CUDA}) {
    expect_ext_refused(d, device, [&](auto &e) { e.mask_mod_broadcast = FLASHBOX_MOD_SAME_HEADS; }, bad,
                       {"mask_mod_broadcast = 2", "mask_mod is NULL"});
    expect_ext_refused(d, device, [&](auto &e) { e.mask_mod = mask.get(), e.mask_mod_broadcast = 4; }, bad,
                       {"mask_mod_broadcast = 4"});
  }
  // The plain call of the same data runs (the refusal is the mod's, not the data's).
  EXPECT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
}

TEST(ModExt, HandlesAreChecked) {
  MaskData d(small_case());
  FakeMod mask(FLASHBOX_MOD_MASK, {}), score(FLASHBOX_MOD_SCORE, {});
  FakeMod dead(FLASHBOX_MOD_MASK, {});
  dead.handle.magic = flashbox_mod_s::kDead;
  const flashbox_aux_tensor t = aux_tensor(nullptr, FLASHBOX_AUX_INT32, {0});
  const int bad = FLASHBOX_ERR_INVALID_ARGUMENT;
  expect_ext_refused(d, FLASHBOX_CPU, [&](auto &e) { e.mask_mod = score.get(); }, bad, {"mask_mod", "score mod"});
  expect_ext_refused(d, FLASHBOX_CPU, [&](auto &e) { e.score_mod = mask.get(); }, bad, {"score_mod", "mask mod"});
  expect_ext_refused(d, FLASHBOX_CPU, [&](auto &e) { e.mask_mod = dead.get(); }, bad, {"mask_mod", "not a live"});
  expect_ext_refused(d, FLASHBOX_CPU, [&](auto &e) { e.mask_mod_aux = &t; }, bad, {"mask_mod_aux is set"});
  expect_ext_refused(d, FLASHBOX_CPU, [&](auto &e) { e.mask_mod = mask.get(), e.mask_mod_aux = &t; }, bad,
                     {"declares no aux tensor"});
}

TEST(ModExt, AuxTensorsAreCheckedAgainstTheDeclaration) {
  MaskData d(small_case());
  FakeMod mask(FLASHBOX_MOD_MASK, {{"doc", FLASHBOX_AUX_INT32, 2}, {"bias", FLASHBOX_AUX_BFLOAT16, 1}});
  std::vector<int32_t> doc(8, 0);
  std::vector<uint16_t> bias(2, 0);
  struct Case {
    const char *what;
    std::function<void(flashbox_aux_tensor *)> edit;
    int code;
    std::vector<std::string> mentions;
    flashbox_device device = FLASHBOX_CPU;
  };
  const Case cases[] = {
      {"data NULL with elements", [](auto *t) { t[0].data = nullptr; }, FLASHBOX_ERR_NULL_POINTER,
       {"mask_mod_aux[0] (doc).data is NULL", "8 element"}},
      {"rank > 4", [](auto *t) { t[1].rank = 5; }, FLASHBOX_ERR_INVALID_ARGUMENT, {"mask_mod_aux[1] (bias).rank = 5"}},
      {"rank differs", [](auto *t) { t[0].rank = 1; }, FLASHBOX_ERR_INVALID_ARGUMENT, {"declares rank 2"}},
      {"dtype unknown", [](auto *t) { flashbox::test::store_int(t[0].dtype, 9); }, FLASHBOX_ERR_UNSUPPORTED_DTYPE,
       {"(doc).dtype = 9"}},
      {"dtype differs", [](auto *t) { t[1].dtype = FLASHBOX_AUX_FLOAT16; }, FLASHBOX_ERR_UNSUPPORTED_DTYPE,
       {"float16", "declares bfloat16"}},
      {"size < 0", [](auto *t) { t[0].sizes[1] = -1; }, FLASHBOX_ERR_INVALID_SIZE, {"(doc).sizes[1] = -1"}},
      {"stride < 0", [](auto *t) { t[0].strides[0] = -8; }, FLASHBOX_ERR_BAD_STRIDE, {"(doc).strides[0] = -8"}},
      {"overflow", [](auto *t) { t[0].strides[1] = int64_t(1) << 61; }, FLASHBOX_ERR_SIZE_OVERFLOW, {"overflow"}},
      {"misaligned", [](auto *t) { t[0].data = static_cast<const char *>(t[0].data) + 2; }, FLASHBOX_ERR_MISALIGNED,
       {"(doc).data is not aligned"}},
      {"wrong device", [](auto *t) { t[0].device = FLASHBOX_CUDA; }, FLASHBOX_ERR_INVALID_ARGUMENT,
       {"(doc).device = cuda", "device = cpu"}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    flashbox_aux_tensor t[2] = {aux_tensor(doc.data(), FLASHBOX_AUX_INT32, {1, 8}),
                                aux_tensor(bias.data(), FLASHBOX_AUX_BFLOAT16, {2})};
    c.edit(t);
    expect_ext_refused(d, c.device, [&](auto &e) { e.mask_mod = mask.get(), e.mask_mod_aux = t; }, c.code,
                       c.mentions);
  }
  // Well-formed tensors reach the backend's refusal; a size-0 tensor may have no data, a 0 stride
  // broadcasts.
  flashbox_aux_tensor t[2] = {aux_tensor(doc.data(), FLASHBOX_AUX_INT32, {1, 8}),
                              aux_tensor(nullptr, FLASHBOX_AUX_BFLOAT16, {0})};
  t[0].strides[0] = 0;
  expect_ext_refused(d, FLASHBOX_CPU, [&](auto &e) { e.mask_mod = mask.get(), e.mask_mod_aux = t; },
                     FLASHBOX_ERR_UNSUPPORTED_IMPL, {"mask_mod"});
  expect_ext_refused(d, FLASHBOX_CPU, [&](auto &e) { e.mask_mod = mask.get(); }, FLASHBOX_ERR_NULL_POINTER,
                     {"mask_mod_aux is NULL", "declares 2 aux tensor"});
}

// A caller compiled against the header before the mod fields passes a shorter struct: it is taken,
// and the fields read as NULL.
TEST(ModExt, TheStructBeforeTheModFieldsIsAccepted) {
  MaskData d(small_case());
  flashbox_attention_ext e = d.ext();
  e.struct_size = int32_t(offsetof(flashbox_attention_ext, mask_mod));
  const flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
}

// The struct of the mod fields without mask_mod_broadcast is taken too (it reads as 0).
TEST(ModExt, TheStructBeforeMaskModBroadcastIsAccepted) {
  MaskData d(small_case());
  flashbox_attention_ext e = d.ext();
  e.struct_size = int32_t(offsetof(flashbox_attention_ext, mask_mod_broadcast));
  const flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
}

TEST(ModInfo, BadHandlesAndDestroy) {
  flashbox_mod_info info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(flashbox_mod_get_info(nullptr, &info), FLASHBOX_ERR_INVALID_ARGUMENT);
  FakeMod mask(FLASHBOX_MOD_MASK, {});
  EXPECT_EQ(flashbox_mod_get_info(mask.get(), nullptr), FLASHBOX_ERR_NULL_POINTER);
  info.struct_size = 4;
  EXPECT_EQ(flashbox_mod_get_info(mask.get(), &info), FLASHBOX_ERR_INVALID_ARGUMENT);
  info.struct_size = sizeof info;
  EXPECT_EQ(flashbox_mod_get_info(mask.get(), &info), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_EQ(info.num_archs, 0);
  flashbox_mod_destroy(nullptr);  // nothing
}

}  // namespace
