// `flashbox memory --json`: the bytes of S, P and Q+K+V+O, recomputed here.
#include "support/cli_runner.hpp"

#include <gtest/gtest.h>

namespace flashbox::test {
namespace {

TEST(CliMemory, OneSeqlenArithmetic) {
  const auto j = run_cli_json("memory --seqlen 1000 --batch 3 --heads 5 --head-dim 32 --dtype fp32 --json");
  ASSERT_EQ(j["rows"].size(), 1u);
  const auto &r = j["rows"][0];
  EXPECT_EQ(r["seqlen"], 1000);
  EXPECT_EQ(r["s_bytes"].get<int64_t>(), int64_t{3} * 5 * 1000 * 1000 * 4);
  EXPECT_EQ(r["p_bytes"].get<int64_t>(), int64_t{3} * 5 * 1000 * 1000 * 4);
  EXPECT_EQ(r["qkvo_bytes"].get<int64_t>(), int64_t{4} * 3 * 1000 * 5 * 32 * 4);
  EXPECT_DOUBLE_EQ(r["s_over_qkvo"].get<double>(), 1000.0 / (4 * 32));
  EXPECT_EQ(j["config"]["dtype"], "fp32");
}

TEST(CliMemory, DefaultsAreTheSpecExperiment) {
  const auto j = run_cli_json("memory --json");
  EXPECT_EQ(j["config"]["batch"], 4);
  EXPECT_EQ(j["config"]["heads"], 12);
  EXPECT_EQ(j["config"]["head_dim"], 64);
  EXPECT_EQ(j["config"]["dtype"], "bf16");
  ASSERT_EQ(j["rows"].size(), 6u);  // 512 ... 16384
  EXPECT_EQ(j["rows"][0]["seqlen"], 512);
  EXPECT_EQ(j["rows"][5]["seqlen"], 16384);
  // T = 2048 (the page's default): one S is 8 times Q+K+V+O, 384 MiB in bf16.
  EXPECT_DOUBLE_EQ(j["rows"][2]["s_over_qkvo"].get<double>(), 8.0);
  EXPECT_EQ(j["rows"][2]["s_bytes"].get<int64_t>(), int64_t{384} << 20);
}

TEST(CliMemory, SeveralSeqlensAndATable) {
  const auto r = run_cli("memory --seqlen 256,4096");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("256"), std::string::npos);
  EXPECT_NE(r.out.find("4096"), std::string::npos);
  EXPECT_NE(r.out.find("16.00x"), std::string::npos) << r.out;  // 4096 / (4 * 64)
}

}  // namespace
}  // namespace flashbox::test
