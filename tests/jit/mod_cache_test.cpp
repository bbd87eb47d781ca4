// The mod compiler's pieces that need no NVRTC (run in every build): SHA-256 against FIPS 180-4's
// examples, the disk cache's entries (round trip; truncated, altered or renamed entries read as
// misses; a directory that cannot be written is no error and leaves nothing), and the translation
// unit's layout (the source behind its own #line, one Tensor per declared aux tensor, the probe).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/sha256.hpp"
#include "jit/mod_cache.hpp"
#include "jit/mod_source.hpp"

namespace fs = std::filesystem;
namespace core = flashbox::core;
namespace jit = flashbox::jit;

namespace {

std::string sha(const std::string &s) { return core::hex(core::sha256(s.data(), s.size())); }

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Fed in pieces that straddle the 64-byte blocks: the same digest.
  const std::string msg(200, 'x');
  core::Sha256 h;
  for (size_t i = 0; i < msg.size(); i += 7) h.update(msg.substr(i, 7));
  EXPECT_EQ(core::hex(h.digest()), sha(msg));
}

TEST(Sha256, FieldsAreUnambiguous) {
  core::Sha256 a, b;
  a.field("ab"), a.field("c");
  b.field("a"), b.field("bc");
  EXPECT_NE(core::hex(a.digest()), core::hex(b.digest()));
}

// A fresh directory under the system's temporary one, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "flashbox_mod_cache_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  size_t files() const {
    size_t n = 0;
    for (auto it = fs::directory_iterator(path); it != fs::directory_iterator(); ++it) ++n;
    return n;
  }
};

const std::string kKey = sha("a mod");

TEST(ModCache, StoreThenLoad) {
  TempDir dir;
  const std::vector<char> image = {'\x7f', 'E', 'L', 'F', 0, 1, 2, 3};
  std::vector<char> back;
  EXPECT_FALSE(jit::cache_load(dir.path, kKey, back));
  ASSERT_TRUE(jit::cache_store(dir.path, kKey, image));
  ASSERT_TRUE(jit::cache_load(dir.path, kKey, back));
  EXPECT_EQ(back, image);
  EXPECT_EQ(dir.files(), 1u) << "the temporary file of the atomic write was left behind";
}

TEST(ModCache, DamagedEntriesAreMisses) {
  TempDir dir;
  const std::vector<char> image(1000, 'c');
  const std::string file = jit::cache_path(dir.path, kKey);
  std::vector<char> back;
  // Truncated (a write cut short), one byte changed, one byte appended, renamed under another key.
  ASSERT_TRUE(jit::cache_store(dir.path, kKey, image));
  fs::resize_file(file, fs::file_size(file) - 10);
  EXPECT_FALSE(jit::cache_load(dir.path, kKey, back));
  ASSERT_TRUE(jit::cache_store(dir.path, kKey, image));
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('d');
  }
  EXPECT_FALSE(jit::cache_load(dir.path, kKey, back));
  ASSERT_TRUE(jit::cache_store(dir.path, kKey, image));
  std::ofstream(file, std::ios::app | std::ios::binary).put('x');
  EXPECT_FALSE(jit::cache_load(dir.path, kKey, back));
  ASSERT_TRUE(jit::cache_store(dir.path, kKey, image));
  const std::string other = sha("another mod");
  fs::rename(file, jit::cache_path(dir.path, other));
  EXPECT_FALSE(jit::cache_load(dir.path, other, back));
  // The store replaces a damaged entry whole.
  ASSERT_TRUE(jit::cache_store(dir.path, other, image));
  ASSERT_TRUE(jit::cache_load(dir.path, other, back));
  EXPECT_EQ(back, image);
}

TEST(ModCache, UnwritableDirectoryIsNoError) {
  TempDir dir;
  const fs::path blocker = dir.path / "a_file";
  std::ofstream(blocker) << "not a directory";
  // A directory below a regular file can be created by no one (root included).
  const std::string unwritable = (blocker / "mods").string();
  EXPECT_FALSE(jit::cache_store(unwritable, kKey, {'a'}));
  std::vector<char> back;
  EXPECT_FALSE(jit::cache_load(unwritable, kKey, back));
  EXPECT_FALSE(jit::cache_store("", kKey, {'a'}));  // no cache directory at all
  EXPECT_EQ(dir.files(), 1u);
}

TEST(ModSource, TranslationUnitLayout) {
  jit::ModSpec spec;
  spec.kind = FLASHBOX_MOD_SCORE;
  spec.function_name = "bias";
  spec.source = "float bias(float s, int b, int h, int q, int kv, const fbx::Aux &aux) { return s + aux.t(h, q); }";
  spec.aux = {{"t", FLASHBOX_AUX_BFLOAT16, 2}, {"ids", FLASHBOX_AUX_INT64, 1}};
  const std::string tu = jit::mod_translation_unit(spec);
  const size_t line = tu.find("#line 1 \"mod.cu\"\n" + spec.source);
  EXPECT_NE(line, std::string::npos) << "the source does not follow its #line";
  EXPECT_NE(tu.find("fbx::Tensor<fbx::bf16, 2> t;"), std::string::npos);
  EXPECT_NE(tu.find("fbx::Tensor<fbx::int64_t, 1> ids;"), std::string::npos);
  EXPECT_NE(tu.find("flashbox_mod_probe"), std::string::npos);
  EXPECT_NE(tu.find("fbx::apply_score<&bias>"), std::string::npos);
  EXPECT_LT(tu.find("struct fbx::Aux"), line) << "the aux tensors are declared after the source";
  // The host's packing of fbx::Aux, which the translation unit asserts: pointer, sizes, strides.
  const jit::AuxLayout layout = jit::aux_layout(spec);
  ASSERT_EQ(layout.offsets.size(), 2u);
  EXPECT_EQ(layout.offsets[1], 40u);  // after t: 8 + 2 x 8 + 2 x 8
  EXPECT_EQ(layout.bytes, 64u);       // ids: 8 + 8 + 8
  EXPECT_NE(tu.find("static_assert(sizeof(fbx::Aux) == 64"), std::string::npos);
  int64_t data[4] = {};
  flashbox_aux_tensor t[2] = {};
  t[0].data = data, t[0].sizes[0] = 3, t[0].sizes[1] = 5, t[0].strides[0] = 5, t[0].strides[1] = 1;
  t[1].data = data + 1, t[1].sizes[0] = 7, t[1].strides[0] = 0;
  const std::vector<uint64_t> words = jit::pack_aux(spec, t);
  ASSERT_EQ(words.size() * 8, layout.bytes);
  EXPECT_EQ(words[0], uint64_t(reinterpret_cast<uintptr_t>(data)));
  EXPECT_EQ((std::vector<uint64_t>(words.begin() + 1, words.end())),
            (std::vector<uint64_t>{3, 5, 5, 1, uint64_t(reinterpret_cast<uintptr_t>(data + 1)), 7, 0}));
  EXPECT_EQ(jit::aux_layout(jit::ModSpec{}).bytes, 1u);  // C++'s empty struct
  EXPECT_EQ(jit::pack_aux(jit::ModSpec{}, nullptr).size(), 1u);
  EXPECT_EQ(jit::arch_name(90), "sm_90a");
  EXPECT_EQ(jit::arch_name(80), "sm_80");
}

}  // namespace
