// flashbox_mod_create with NVRTC, through the C API, on any machine (NVRTC needs no GPU): a mask mod
// and a score mod with aux tensors compile (for the device's arch, or sm_80 and sm_90a without a
// GPU); the second create of the same mod reads the disk cache (both times printed, the second under
// a tenth of the first); a syntax error, an undefined name and a wrong signature return
// FLASHBOX_ERR_INVALID_ARGUMENT with the compiler's message, its line in the caller's source, and
// nothing cached; a damaged cache entry is compiled again. The cache directory is a fresh one per
// process: XDG_CACHE_HOME is set before the first create, the only time the library reads it.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "flashbox/flashbox.h"

namespace fs = std::filesystem;

namespace {

fs::path g_cache_root;

class CacheDirEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "flashbox_mods_test_XXXXXX").string();
    g_cache_root = ::mkdtemp(tmpl.data());
    ::setenv("XDG_CACHE_HOME", g_cache_root.c_str(), 1);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(g_cache_root, ec);
  }
};
[[maybe_unused]] ::testing::Environment *const g_env = ::testing::AddGlobalTestEnvironment(new CacheDirEnvironment);

fs::path mods_dir() { return g_cache_root / "flashbox" / "mods"; }

size_t entries() {
  std::error_code ec;
  size_t n = 0;
  for (auto it = fs::directory_iterator(mods_dir(), ec); !ec && it != fs::directory_iterator(); ++it) ++n;
  return n;
}

// A comment no earlier run wrote, so that a first create really compiles even if a directory is reused.
[[maybe_unused]] std::string nonce() {
  std::random_device rd;
  return "// run " + std::to_string(rd()) + "-" + std::to_string(rd()) + "\n";
}

[[maybe_unused]] flashbox_mod_info info_of(flashbox_mod mod) {
  flashbox_mod_info info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(flashbox_mod_get_info(mod, &info), FLASHBOX_OK) << flashbox_last_error();
  return info;
}

const flashbox_aux_decl kDocAux[] = {{"doc", FLASHBOX_AUX_INT32, 2}};

// `source` must outlive the returned declaration.
flashbox_mod_desc doc_causal(const char *source) {
  flashbox_mod_desc d{};
  d.struct_size = sizeof d;
  d.kind = FLASHBOX_MOD_MASK;
  d.source = source;
  d.function_name = "doc_causal";
  d.num_aux = 1;
  d.aux = kDocAux;
  return d;
}

const char kDocCausal[] =
    "// packed documents, causal inside each\n"
    "bool doc_causal(int b, int h, int q_idx, int kv_idx, const fbx::Aux &aux) {\n"
    "  return aux.doc(b, q_idx) == aux.doc(b, kv_idx) && kv_idx <= q_idx;\n"
    "}\n";

#ifdef FLASHBOX_HAVE_NVRTC

double seconds_of(const std::function<void()> &f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ModCompile, MaskModCompilesThenHitsTheCache) {
  const std::string source = nonce() + kDocCausal;
  const flashbox_mod_desc d = doc_causal(source.c_str());
  flashbox_mod first = nullptr, second = nullptr;
  const double t_first = seconds_of([&] { ASSERT_EQ(flashbox_mod_create(&d, &first), FLASHBOX_OK) << flashbox_last_error(); });
  const double t_second = seconds_of([&] { ASSERT_EQ(flashbox_mod_create(&d, &second), FLASHBOX_OK) << flashbox_last_error(); });
  const flashbox_mod_info a = info_of(first), b = info_of(second);
  std::printf("mask mod with one aux tensor, %d arch(s): first create %.3f s (compiled), second %.4f s (cache)\n",
              a.num_archs, t_first, t_second);
  EXPECT_EQ(a.from_cache, 0);
  EXPECT_EQ(b.from_cache, 1);
  EXPECT_EQ(a.cached, 1);
  EXPECT_LT(t_second, t_first / 10);
  if (flashbox_cuda_device_count() == 0) {
    ASSERT_EQ(a.num_archs, 2);
    EXPECT_EQ(a.archs[0], 80);
    EXPECT_EQ(a.archs[1], 90);
  }
  for (int i = 0; i < a.num_archs; ++i) {
    EXPECT_GT(a.cubin_bytes[i], 0);
    EXPECT_EQ(a.cubin_bytes[i], b.cubin_bytes[i]);
  }
  EXPECT_STREQ(a.key, b.key);
  EXPECT_TRUE(fs::exists(mods_dir() / (std::string(a.key) + ".cubin")));
  EXPECT_EQ(entries(), size_t(a.num_archs));
  flashbox_mod_destroy(first);
  flashbox_mod_destroy(second);
}

TEST(ModCompile, ScoreModWithAuxTensorsOfEveryDtype) {
  static const flashbox_aux_decl aux[] = {{"bias", FLASHBOX_AUX_BFLOAT16, 2},  {"slope", FLASHBOX_AUX_FLOAT16, 1},
                                          {"scale", FLASHBOX_AUX_FLOAT32, 1}, {"pos", FLASHBOX_AUX_INT64, 3},
                                          {"keep", FLASHBOX_AUX_UINT8, 4},    {"doc", FLASHBOX_AUX_INT32, 1}};
  const std::string source = nonce() +
                             "float rel_bias(float score, int b, int h, int q, int kv, const fbx::Aux &aux) {\n"
                             "  const float s = score * aux.scale(h) - aux.slope(h) * float(q - kv);\n"
                             "  return aux.keep(b, h, q, kv) && aux.doc(q) >= 0 ? s + aux.bias(h, q - kv + "
                             "int(aux.pos(b, 0, 0))) : s;\n"
                             "}\n";
  flashbox_mod_desc d{};
  d.struct_size = sizeof d;
  d.kind = FLASHBOX_MOD_SCORE;
  d.source = source.c_str();
  d.function_name = "rel_bias";
  d.num_aux = 6;
  d.aux = aux;
  d.arch = 90;
  flashbox_mod mod = nullptr;
  ASSERT_EQ(flashbox_mod_create(&d, &mod), FLASHBOX_OK) << flashbox_last_error();
  const flashbox_mod_info info = info_of(mod);
  EXPECT_EQ(info.num_archs, 1);
  EXPECT_EQ(info.archs[0], 90);
  flashbox_mod_destroy(mod);
}

// A mask mod's CUBIN holds the block kernels the CUDA path launches by name
// (src/api/mask_mod_tiles.cpp), with and without aux tensors (fbx::Aux then the empty struct), for
// sm_80 and sm_90a; a score mod's holds none of them. Read from the cache entry: the kernels' names
// are in the ELF's string table.
TEST(ModCompile, MaskModsCarryTheirBlockKernels) {
  const char *const kernels[] = {"flashbox_mask_classify", "flashbox_mask_lists", "flashbox_mask_tile_base",
                                 "flashbox_mask_bits", "flashbox_mod_probe"};
  const std::string with_aux = nonce() + kDocCausal;
  const std::string no_aux = nonce() + "bool sliding(int b, int h, int q, int kv) { return kv <= q && q - kv < 256; }\n";
  const std::string score = nonce() + "float cap(float s, int b, int h, int q, int kv) { return s < 30.f ? s : 30.f; }\n";
  for (int arch : {80, 90}) {
    for (int which = 0; which < 3; ++which) {
      flashbox_mod_desc d = doc_causal(with_aux.c_str());
      if (which > 0) d.num_aux = 0, d.aux = nullptr;
      if (which == 1) d.source = no_aux.c_str(), d.function_name = "sliding";
      if (which == 2) d.source = score.c_str(), d.function_name = "cap", d.kind = FLASHBOX_MOD_SCORE;
      d.arch = arch;
      SCOPED_TRACE(std::string(d.function_name) + " sm_" + std::to_string(arch));
      flashbox_mod mod = nullptr;
      ASSERT_EQ(flashbox_mod_create(&d, &mod), FLASHBOX_OK) << flashbox_last_error();
      const flashbox_mod_info info = info_of(mod);
      flashbox_mod_destroy(mod);
      std::ifstream in(mods_dir() / (std::string(info.key) + ".cubin"), std::ios::binary);
      ASSERT_TRUE(in) << "no cache entry";
      const std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (const char *k : kernels) {
        const bool block_kernel = std::string(k) != "flashbox_mod_probe";
        EXPECT_EQ(image.find(k) != std::string::npos, which == 2 ? !block_kernel : true) << k;
      }
    }
  }
}

// The compiler's message, with the line of the caller's source, and nothing cached or returned.
void expect_compile_error(const flashbox_mod_desc &d, const std::vector<std::string> &mentions) {
  const size_t before = entries();
  flashbox_mod mod = nullptr;
  EXPECT_EQ(flashbox_mod_create(&d, &mod), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mod, nullptr);
  const std::string msg = flashbox_last_error();
  for (const std::string &m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "'" << m << "' not in: " << msg;
  EXPECT_EQ(entries(), before) << "a mod that does not compile left a cache entry";
}

TEST(ModCompile, CompileErrorsReturnTheCompilersMessage) {
  SCOPED_TRACE("undefined name, missing ';'");
  const std::string undefined = std::string("bool doc_causal(int b, int h, int q, int kv, const fbx::Aux &aux) {\n") +
                                "  return aux.doc(b, q) == document_of(kv)\n}\n";
  expect_compile_error(doc_causal(undefined.c_str()),
                       {"does not compile", "mod.cu(2): error", "identifier \"document_of\" is undefined"});
  SCOPED_TRACE("an aux tensor the mod did not declare");
  const std::string no_member = "bool doc_causal(int b, int h, int q, int kv, const fbx::Aux &aux) {\n"
                                "  return aux.segment(b, q) == 0;\n}\n";
  expect_compile_error(doc_causal(no_member.c_str()), {"mod.cu(2): error", "segment"});
  SCOPED_TRACE("no function of that name");
  flashbox_mod_desc d = doc_causal(kDocCausal);
  d.function_name = "docs_causal";
  expect_compile_error(d, {"identifier \"docs_causal\" is undefined"});
}

TEST(ModCompile, WrongSignatureIsAClearError) {
  const std::string wrong = "bool doc_causal(int b, int h, long q, int kv) { return q >= kv; }\n";
  expect_compile_error(doc_causal(wrong.c_str()),
                       {"the mask mod doc_causal must be bool doc_causal(int b, int h, int q_idx, int kv_idx)"});
  // A mask where a score mod is declared.
  flashbox_mod_desc d = doc_causal(kDocCausal);
  d.kind = FLASHBOX_MOD_SCORE;
  expect_compile_error(d, {"the score mod doc_causal must be float doc_causal(float score"});
}

TEST(ModCompile, DamagedCacheEntryIsCompiledAgain) {
  const std::string source = nonce() + kDocCausal;
  flashbox_mod_desc d = doc_causal(source.c_str());
  d.arch = 80;
  flashbox_mod mod = nullptr;
  ASSERT_EQ(flashbox_mod_create(&d, &mod), FLASHBOX_OK) << flashbox_last_error();
  const flashbox_mod_info first = info_of(mod);
  flashbox_mod_destroy(mod);
  const fs::path entry = mods_dir() / (std::string(first.key) + ".cubin");
  const auto whole = fs::file_size(entry);
  for (const char *damage : {"truncated", "a byte changed"}) {
    SCOPED_TRACE(damage);
    if (std::string(damage) == "truncated") {
      fs::resize_file(entry, whole / 2);
    } else {
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(std::streamoff(whole - 1));
      const char last = char(f.get());
      f.seekp(std::streamoff(whole - 1));
      f.put(char(~last));
    }
    ASSERT_EQ(flashbox_mod_create(&d, &mod), FLASHBOX_OK) << flashbox_last_error();
    const flashbox_mod_info again = info_of(mod);
    flashbox_mod_destroy(mod);
    EXPECT_EQ(again.from_cache, 0) << "a damaged entry was used";
    EXPECT_EQ(fs::file_size(entry), whole) << "the entry was not rewritten whole";
    ASSERT_EQ(flashbox_mod_create(&d, &mod), FLASHBOX_OK) << flashbox_last_error();
    EXPECT_EQ(info_of(mod).from_cache, 1);
    flashbox_mod_destroy(mod);
  }
}

#else

TEST(ModCompile, RefusedWithoutNvrtc) {
  const flashbox_mod_desc d = doc_causal(kDocCausal);
  flashbox_mod mod = nullptr;
  EXPECT_EQ(flashbox_mod_create(&d, &mod), FLASHBOX_ERR_UNSUPPORTED_IMPL);
  EXPECT_EQ(mod, nullptr);
  EXPECT_EQ(entries(), 0u);
}

#endif

}  // namespace
