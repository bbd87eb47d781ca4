// The online softmax trace against a direct computation: after every block, m is the max of the
// values read so far, l = sum exp(x - m) over them, the rescale is exp(m_old - m); the final softmax
// matches the two-pass one.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "cpu/online_softmax_trace.hpp"
#include "support/attention_case.hpp"

using namespace flashbox::cpu;

namespace {

void check_against_direct(const std::vector<double> &x, int64_t block) {
  const OnlineSoftmaxTrace t = online_softmax_trace(x, block);
  ASSERT_EQ(int64_t(t.steps.size()), (int64_t(x.size()) + block - 1) / block);
  double prev_m = -INFINITY;
  for (size_t k = 0; k < t.steps.size(); ++k) {
    const OnlineSoftmaxStep &s = t.steps[k];
    const int64_t read = std::min<int64_t>(int64_t(x.size()), int64_t(k + 1) * block);
    EXPECT_EQ(s.numbers_read, read);
    EXPECT_EQ(int64_t(s.block_values.size()), read - int64_t(k) * block);
    double m = -INFINITY;
    for (int64_t i = 0; i < read; ++i) m = std::max(m, x[size_t(i)]);
    double l = 0;
    for (int64_t i = 0; i < read; ++i) l += std::exp(x[size_t(i)] - m);
    EXPECT_NEAR(s.m, m, 1e-6 * std::max(1.0, std::abs(m)));
    EXPECT_NEAR(s.l, l, 1e-5 * l);
    EXPECT_EQ(s.m_old, prev_m);
    EXPECT_NEAR(s.rescale, std::exp(prev_m - m), 1e-6);
    prev_m = s.m;
  }
  double mx = -INFINITY, sum = 0;
  for (double v : x) mx = std::max(mx, v);
  for (double v : x) sum += std::exp(v - mx);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(t.exact[i], std::exp(x[i] - mx) / sum, 1e-15);
    EXPECT_NEAR(t.softmax[i], t.exact[i], 1e-6);
  }
  EXPECT_LT(t.max_abs_error, 1e-6);
  EXPECT_FALSE(std::isnan(t.max_abs_error));
}

}  // namespace

TEST(OnlineSoftmaxTrace, DefaultsRescaleVisibly) {
  const std::vector<double> x = default_trace_values();
  ASSERT_EQ(x.size(), 8u);
  check_against_direct(x, 2);
  const OnlineSoftmaxTrace t = online_softmax_trace(x, 2);
  int rescaled = 0;
  for (size_t k = 1; k < t.steps.size(); ++k) rescaled += t.steps[k].rescale < 1.0;
  EXPECT_GE(rescaled, 2) << "the default values should raise the running max in several blocks";
  EXPECT_EQ(t.steps[0].rescale, 0.0);  // exp(-inf - m): the empty state contributes nothing
}

TEST(OnlineSoftmaxTrace, RandomRowsAndBlockSizes) {
  const uint64_t seed = flashbox::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FLASHBOX_TEST_SEED to rerun)");
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 5.0);
  for (int64_t n : {1, 7, 8, 33})
    for (int64_t block : {1, 2, 3, 8, 64}) {
      std::vector<double> x(static_cast<size_t>(n));
      for (double &v : x) v = normal(rng);
      check_against_direct(x, block);
    }
}

TEST(OnlineSoftmaxTrace, LargeScoresDoNotOverflow) {
  check_against_direct({100.0, 300.0, 200.0, 500.0, 499.0}, 2);  // exp(500) would overflow fp32
}

TEST(OnlineSoftmaxTrace, RejectsBadInput) {
  EXPECT_THROW(online_softmax_trace(std::vector<double>{}, 2), std::invalid_argument);
  EXPECT_THROW(online_softmax_trace(std::vector<double>{1.0}, 0), std::invalid_argument);
  EXPECT_THROW(online_softmax_trace(std::vector<double>{1.0, NAN}, 1), std::invalid_argument);
}
