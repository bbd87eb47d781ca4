// `flashbox softmax-trace --json` against the online softmax computed here, directly.
#include "support/cli_runner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace flashbox::test {
namespace {

TEST(CliSoftmaxTrace, JsonStepsEqualADirectComputation) {
  const std::vector<double> x = {1.5, -2.0, 3.25, 0.0, 7.0, 6.5, -1.0};
  const int block = 3;
  const auto j = run_cli_json("softmax-trace --values 1.5,-2,3.25,0,7,6.5,-1 --block 3 --json");
  ASSERT_EQ(j["values"].size(), x.size());
  ASSERT_EQ(j["block"], block);
  const auto &steps = j["steps"];
  ASSERT_EQ(steps.size(), 3u);  // blocks of 3, 3 and 1

  double m = -std::numeric_limits<double>::infinity(), l = 0;
  for (size_t b = 0; b < steps.size(); ++b) {
    const size_t begin = b * block, end = std::min(x.size(), begin + block);
    double block_max = -std::numeric_limits<double>::infinity();
    for (size_t i = begin; i < end; ++i) block_max = std::max(block_max, x[i]);
    const double m_new = std::max(m, block_max);
    const double rescale = std::exp(m - m_new);
    l *= rescale;
    for (size_t i = begin; i < end; ++i) l += std::exp(x[i] - m_new);
    m = m_new;
    const auto &s = steps[b];
    EXPECT_EQ(s["block_index"], b);
    EXPECT_EQ(s["numbers_read"], end);
    EXPECT_EQ(s["read"].size(), end - begin);
    EXPECT_DOUBLE_EQ(s["m"].get<double>(), m) << "block " << b;
    EXPECT_NEAR(s["l"].get<double>(), l, 1e-5 * l) << "block " << b;  // the trace runs in fp32
    EXPECT_NEAR(s["rescale"].get<double>(), rescale, 1e-6) << "block " << b;
  }
  double max_err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp(x[i] - m) / l;
    EXPECT_NEAR(j["exact_softmax"][i].get<double>(), exact, 1e-12);
    EXPECT_NEAR(j["softmax"][i].get<double>(), exact, 1e-6);
    max_err = std::max(max_err, std::fabs(j["softmax"][i].get<double>() - exact));
  }
  EXPECT_NEAR(j["max_abs_error"].get<double>(), max_err, 1e-9);
  EXPECT_TRUE(j["steps"][0]["m_old"].is_null());  // -inf before the first block
}

TEST(CliSoftmaxTrace, DefaultIsEightNumbersInBlocksOfTwo) {
  const auto j = run_cli_json("softmax-trace --json");
  EXPECT_EQ(j["values"].size(), 8u);
  EXPECT_EQ(j["block"], 2);
  ASSERT_EQ(j["steps"].size(), 4u);
  for (const auto &s : j["steps"]) EXPECT_GT(s["l"].get<double>(), 0.0);
  EXPECT_LT(j["max_abs_error"].get<double>(), 1e-6);
}

TEST(CliSoftmaxTrace, TableShowsEveryBlock) {
  const auto r = run_cli("softmax-trace --values 4,1,2 --block 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rescale"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max abs error"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace flashbox::test
