// `flashbox bench --device cpu` on tiny sizes: real timings, library-measured scratch, the JSON schema.
#include "flashbox/flashbox.h"
#include "support/cli_runner.hpp"

#include <gtest/gtest.h>

namespace flashbox::test {
namespace {

TEST(CliBench, CpuForwardRows) {
  const auto j = run_cli_json("bench --device cpu --seqlens 64,256 --batch 1 --heads 2 --repeats 3 --warmup 0 --json");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["config"]["repeats"], 3);
  EXPECT_EQ(j["config"]["causal"], true);
  ASSERT_EQ(j["rows"].size(), 4u);  // naive and blocked at two T
  for (const auto &row : j["rows"]) {
    EXPECT_EQ(row["status"], "ok") << row.dump();
    EXPECT_EQ(row["device"], "cpu");
    EXPECT_EQ(row["direction"], "forward");
    EXPECT_GT(row["ms"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["tflops"].get<double>(), 0.0);
    EXPECT_GE(row["extra_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(row["repeats"], 3);
    EXPECT_FALSE(row["kernel"].get<std::string>().empty());
  }
  // TFLOP/s is the causal count 2*B*H*T^2*D over the median time.
  const auto &first = j["rows"][0];
  EXPECT_NEAR(first["tflops"].get<double>(), 2.0 * 1 * 2 * 64 * 64 * 64 / (first["ms"].get<double>() * 1e-3) / 1e12,
              1e-9);
  // Naive materialises S and P (T x T per head): its scratch grows with T and, at T = 256, exceeds the
  // blocked level's fixed tiles.
  EXPECT_EQ(j["rows"][2]["impl"], "naive");
  EXPECT_EQ(j["rows"][3]["impl"], "blocked");
  EXPECT_GT(j["rows"][2]["extra_bytes"].get<int64_t>(), j["rows"][3]["extra_bytes"].get<int64_t>());
  EXPECT_GT(j["rows"][2]["extra_bytes"].get<int64_t>(), 4 * j["rows"][0]["extra_bytes"].get<int64_t>());
}

TEST(CliBench, CpuBackwardRows) {
  const auto r = run_cli(
      "bench --device cpu --backward --impls blocked --seqlens 64 --batch 1 --heads 2 --repeats 2 "
      "--warmup 0 --no-causal --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 1u);
  const auto &row = j["rows"][0];
  EXPECT_EQ(row["direction"], "backward");
  EXPECT_EQ(j["config"]["causal"], false);
  ASSERT_EQ(row["status"], "ok") << row.dump();
  EXPECT_GT(row["ms"].get<double>(), 0.0);
  // Backward FLOPs are 2.5x the forward's (non-causal 4*B*H*T^2*D).
  EXPECT_NEAR(row["tflops"].get<double>(), 2.5 * 4.0 * 2 * 64 * 64 * 64 / (row["ms"].get<double>() * 1e-3) / 1e12,
              1e-9);
}

TEST(CliBench, TableOnTheTerminal) {
  const auto r = run_cli("bench --device cpu --seqlens 32 --batch 1 --heads 1 --repeats 1 --warmup 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("TFLOP/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("naive"), std::string::npos);
  EXPECT_NE(r.out.find("blocked"), std::string::npos);
}

TEST(CliBench, CudaWithoutAGpuSaysSo) {
  if (flashbox_cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  const auto r = run_cli("bench --device cuda --seqlens 64");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--device cpu"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flashbox::test
