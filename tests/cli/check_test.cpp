// `flashbox check`: the table, the JSON and the exit status on small shapes.
#include "support/cli_runner.hpp"

#include <gtest/gtest.h>

namespace flashbox::test {
namespace {

TEST(CliCheck, TablePassesAndNamesTheSeed) {
  const auto r = run_cli("check --batch 1 --heads 2 --seqlen-q 100 --seed 77");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("seed 77"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("naive"), std::string::npos);
  EXPECT_NE(r.out.find("blocked"), std::string::npos);
  EXPECT_NE(r.out.find("pass"), std::string::npos);
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU blocked vs CPU naive"), std::string::npos) << r.out;
}

TEST(CliCheck, JsonRowsAgainstTheReference) {
  const auto j = run_cli_json(
      "check --batch 2 --heads 4 --heads-kv 2 --seqlen-q 65 --seqlen-k 90 --head-dim 64 "
      "--no-causal --seed 5 --json");
  EXPECT_EQ(j["config"]["heads_kv"], 2);
  EXPECT_EQ(j["config"]["seqlen_k"], 90);
  EXPECT_EQ(j["config"]["causal"], false);
  EXPECT_EQ(j["config"]["seed"], 5);
  EXPECT_EQ(j["config"]["dtype"], "bf16");
  ASSERT_GE(j["rows"].size(), 2u);
  for (const auto &row : j["rows"]) {
    EXPECT_EQ(row["status"], "ok") << row.dump();
    EXPECT_TRUE(row["passed"].get<bool>()) << row.dump();
    EXPECT_LT(row["rel_error"].get<double>(), 1e-2) << row.dump();
    // bf16 inputs: the output's own rounding makes the error visible, never exactly zero.
    EXPECT_GT(row["max_abs_error"].get<double>(), 0.0) << row.dump();
    EXPECT_FALSE(row["kernel"].get<std::string>().empty());
  }
  EXPECT_EQ(j["rows"][0]["device"], "cpu");
  EXPECT_EQ(j["rows"][0]["impl"], "naive");
  EXPECT_EQ(j["rows"][1]["impl"], "blocked");
  ASSERT_TRUE(j["blocked_vs_naive"].is_object());
  EXPECT_LT(j["blocked_vs_naive"]["rel"].get<double>(), 2.5e-3);
  EXPECT_TRUE(j["all_passed"].get<bool>());
}

TEST(CliCheck, Fp32MeetsItsTighterThreshold) {
  const auto j = run_cli_json("check --batch 1 --heads 2 --seqlen-q 70 --dtype fp32 --json");
  EXPECT_DOUBLE_EQ(j["threshold"].get<double>(), 1e-5);
  for (const auto &row : j["rows"]) EXPECT_LT(row["rel_error"].get<double>(), 1e-5) << row.dump();
}

TEST(CliCheck, AShapeTheApiRejectsFailsWithAMessage) {
  const auto r = run_cli("check --heads 3 --heads-kv 2 --seqlen-q 10");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("multiple"), std::string::npos) << r.err;
}

TEST(CliCheck, UnsupportedHeadDimIsAFailedRowAndNonZeroExit) {
  // No implementation supports head_dim 100000: each row is an error, so check must fail.
  const auto r = run_cli("check --batch 1 --heads 1 --seqlen-q 8 --head-dim 100000 --json");
  ASSERT_EQ(r.exit_code, 1) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["all_passed"].get<bool>());
  EXPECT_EQ(j["rows"][0]["status"], "error");
  EXPECT_TRUE(j["rows"][0]["rel_error"].is_null());
  EXPECT_NE(j["rows"][0]["error"].get<std::string>().find("head_dim"), std::string::npos) << j["rows"][0].dump();
}

}  // namespace
}  // namespace flashbox::test
