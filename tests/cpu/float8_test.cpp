// FP8 e4m3 conversions (src/core/float8.hpp) against the format's definition, written out here from
// the OCP FP8 specification: every one of the 256 codes decodes to its value, every finite code
// survives a round trip, every midpoint between neighbouring codes rounds to the even one (and a hair
// off it to the nearer), and overflow, NaN, infinity and the subnormal range behave as documented.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/float8.hpp"

using flashbox::core::e4m3_to_float;
using flashbox::core::float_to_e4m3;
using flashbox::core::Overflow;

namespace {

// The OCP definition by integer arithmetic: s eeee mmm, bias 7, subnormals at e = 0, NaN at
// e = 15 and m = 7, no infinities.
double spec_value(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -mag : mag;
}

TEST(Float8E4m3, EveryCodeDecodesToItsValue) {
  for (int c = 0; c < 256; ++c) {
    const double want = spec_value(c);
    const float got = e4m3_to_float(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(double(got), want) << "code " << c;
      EXPECT_EQ(std::signbit(got), bool(c & 0x80)) << "code " << c;
    }
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(Float8E4m3, FiniteCodesRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    if (std::isnan(spec_value(c))) continue;
    for (Overflow o : {Overflow::saturate, Overflow::nan})
      EXPECT_EQ(float_to_e4m3(e4m3_to_float(uint8_t(c)), o), c) << "code " << c;
  }
}

TEST(Float8E4m3, MidpointsRoundToEven) {
  // Positive finite codes in value order are 0x00..0x7e; each neighbouring pair's midpoint goes to the
  // even code, and a step of 1/64 of the gap either side goes to the nearer one.
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = spec_value(c), hi = spec_value(c + 1), mid = (lo + hi) / 2, gap = hi - lo;
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(float_to_e4m3(float(mid)), even) << "midpoint of codes " << c << " and " << c + 1;
    EXPECT_EQ(float_to_e4m3(float(mid - gap / 64)), c) << "just below the midpoint after code " << c;
    EXPECT_EQ(float_to_e4m3(float(mid + gap / 64)), c + 1) << "just above the midpoint after code " << c;
    EXPECT_EQ(float_to_e4m3(float(-mid - gap / 64)), 0x80 | (c + 1)) << "negative, code " << c;
  }
}

TEST(Float8E4m3, OverflowNanInfinityAndTiny) {
  for (float big : {449.0f, 464.0f, 465.0f, 1e6f, INFINITY}) {
    EXPECT_EQ(float_to_e4m3(big, Overflow::saturate), 0x7e) << big;
    EXPECT_EQ(float_to_e4m3(-big, Overflow::saturate), 0xfe) << big;
  }
  EXPECT_EQ(float_to_e4m3(464.0f, Overflow::nan), 0x7e);  // the midpoint rounds to even: 448
  for (float big : {465.0f, 1e6f, INFINITY}) {
    EXPECT_TRUE(std::isnan(e4m3_to_float(float_to_e4m3(big, Overflow::nan)))) << big;
    EXPECT_TRUE(std::isnan(e4m3_to_float(float_to_e4m3(-big, Overflow::nan)))) << big;
  }
  EXPECT_TRUE(std::isnan(e4m3_to_float(float_to_e4m3(NAN))));
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: ties to 0
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.1f, -10)), 0x01);
  EXPECT_EQ(float_to_e4m3(-std::ldexp(1.0f, -12)), 0x80);  // -0
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -6)), 0x08);    // the smallest normal
}

}  // namespace
