// The GPU tests' O and LSE comparison (tests/support/output_error.hpp) on hand-made values, so that
// what the GPU tests assert is checked where there is no GPU: the relative error and its NaN flag,
// and the two LSE rules on rows without keys (-inf), infinite and NaN outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/output_error.hpp"

namespace flashbox::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr float kNanF = std::numeric_limits<float>::quiet_NaN();

TEST(OutputError, RelativeErrorAndNanFlag) {
  const std::vector<double> ref = {3, 4};
  RelError e = rel_error({3, 4}, ref);
  EXPECT_EQ(e.rel, 0);
  EXPECT_FALSE(e.nan);
  e = rel_error({3, 4 + 0.05}, ref);
  EXPECT_NEAR(e.rel, 0.01, 1e-12);  // ||(0, 0.05)|| / ||(3, 4)||
  e = rel_error({1, 0}, {0, 0});    // a reference of zeros: ||got|| itself
  EXPECT_EQ(e.rel, 1);
  e = rel_error({std::nan(""), 4}, ref);
  EXPECT_TRUE(e.nan);
  EXPECT_TRUE(std::isnan(e.rel));
  e = rel_error({kInf, 4}, ref);
  EXPECT_TRUE(e.nan);
  // Through an accessor, as the tests read O from its dtype and strides: every other value here.
  const std::vector<double> strided = {3, -1, 4, -1};
  e = rel_error_of([&](size_t i) { return strided[2 * i]; }, ref);
  EXPECT_EQ(e.rel, 0);
}

// Each row: the output's LSE against a reference of {1, -inf, 2, -inf}, what each rule counts as bad
// and the largest error it keeps.
struct LseRow {
  const char *what;
  float got[4];
  int64_t bad_equal, bad_minus_inf;
  double max_equal, max_minus_inf;
};

TEST(OutputError, LseRules) {
  const std::vector<double> ref = {1.0, -kInf, 2.0, -kInf};
  const LseRow rows[] = {
      {"close, -inf where the reference is", {1.25f, -kInfF, 2.0f, -kInfF}, 0, 0, 0.25, 0.25},
      {"+inf is not the reference's -inf", {1.0f, kInfF, 2.0f, -kInfF}, 1, 1, 0, 0},
      // A finite reference: inf is counted by both; equal_where_infinite leaves it out of the error,
      // minus_inf_where_reference_is keeps it (the error is infinite).
      {"inf where the reference is finite", {kInfF, -kInfF, 2.0f, -kInfF}, 1, 1, 0, kInf},
      // NaN is counted by both rules and by neither kept in the error; so is a finite value where
      // the reference is -inf.
      {"NaN and finite where -inf", {1.0f, kNanF, kNanF, 0.0f}, 3, 3, 0, 0},
      {"all wrong", {kInfF, 0.0f, kNanF, kNanF}, 4, 4, 0, kInf},
  };
  for (const LseRow &r : rows) {
    SCOPED_TRACE(r.what);
    const LseError eq = lse_error(r.got, ref, LseRule::equal_where_infinite);
    EXPECT_EQ(eq.bad, r.bad_equal);
    EXPECT_EQ(eq.max_abs, r.max_equal);
    const LseError mi = lse_error(r.got, ref, LseRule::minus_inf_where_reference_is);
    EXPECT_EQ(mi.bad, r.bad_minus_inf);
    EXPECT_EQ(mi.max_abs, r.max_minus_inf);
  }
}

}  // namespace
}  // namespace flashbox::test
