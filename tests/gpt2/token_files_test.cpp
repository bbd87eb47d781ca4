// Token files: llm.c shards written and read back, raw uint16 arrays, and broken files.
#include <gtest/gtest.h>

#include <cstring>

#include "gpt2/tokens/token_files.hpp"
#include "gpt2_test_util.hpp"

using namespace flashbox::gpt2;
using gpt2_test::error_of;
using gpt2_test::ScratchDir;

TEST(TokenFiles, ShardRoundTrip) {
  ScratchDir dir;
  const std::vector<int32_t> tokens = {50256, 0, 1, 65535, 464, 2068};
  write_token_shard(dir / "t.bin", tokens);
  EXPECT_EQ(gpt2_test::read_bytes(dir / "t.bin").size(), 1024u + 12u);
  EXPECT_EQ(read_token_file(dir / "t.bin"), tokens);
  EXPECT_NE(error_of([&] { write_token_shard(dir / "u.bin", {70000}); }).find("uint16"), std::string::npos);
}

TEST(TokenFiles, RawUint16Array) {
  ScratchDir dir;
  const uint16_t raw[] = {15496, 995, 0, 50256};
  gpt2_test::write_bytes(dir / "raw.bin", std::string(reinterpret_cast<const char *>(raw), sizeof raw));
  EXPECT_EQ(read_token_file(dir / "raw.bin"), (std::vector<int32_t>{15496, 995, 0, 50256}));
}

TEST(TokenFiles, BrokenFilesAreClearErrors) {
  ScratchDir dir;
  write_token_shard(dir / "t.bin", std::vector<int32_t>(100, 7));
  const std::string good = gpt2_test::read_bytes(dir / "t.bin");
  auto error_for = [&](const std::string &bytes) {
    gpt2_test::write_bytes(dir / "bad.bin", bytes);
    return error_of([&] { read_token_file(dir / "bad.bin"); });
  };
  EXPECT_NE(error_for(good.substr(0, good.size() - 2)).find("truncated"), std::string::npos);
  EXPECT_NE(error_for(good + "zz").find("header says 100 tokens"), std::string::npos);
  std::string v2 = good;
  const int32_t two = 2;
  std::memcpy(v2.data() + 4, &two, 4);
  EXPECT_NE(error_for(v2).find("version 2"), std::string::npos);
  EXPECT_NE(error_for("abc").find("odd size"), std::string::npos);
  EXPECT_NE(error_for("").find("no tokens"), std::string::npos);
  EXPECT_NE(error_of([&] { read_token_file(dir / "missing.bin"); }).find("cannot open"), std::string::npos);
}
