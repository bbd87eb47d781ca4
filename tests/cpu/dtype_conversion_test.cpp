// fp16/bf16 conversions: exact round trips for every 16-bit pattern, and round-to-nearest-even for
// fp32 -> 16 bit checked against the neighbouring representable values (and against the compiler's
// own _Float16 conversion where it has one).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.hpp"
#include "support/attention_case.hpp"

using namespace flashbox::cpu;

TEST(DtypeConversion, HalfRoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
      continue;
    }
    EXPECT_EQ(float_to_half(f), uint16_t(h)) << "pattern " << h << " value " << f;
  }
}

TEST(DtypeConversion, Bf16RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f)))) << b;
      continue;
    }
    EXPECT_EQ(float_to_bf16(f), uint16_t(b)) << "pattern " << b;
  }
}

// The converted value must be at least as close as its two neighbours, and on a tie be even.
template <class ToFloat>
void expect_nearest_even(float f, uint16_t got, ToFloat to_float, const char *what) {
  const double g = to_float(got);
  if (std::isinf(g)) return;  // overflow handled by the explicit cases below
  for (int delta : {-1, 1}) {
    const uint16_t n = uint16_t(got + delta);
    const double nv = to_float(n);
    if (std::isnan(nv) || ((n ^ got) & 0x8000)) continue;  // crossed into NaN or the other sign
    const double dg = std::abs(double(f) - g), dn = std::abs(double(f) - nv);
    ASSERT_LE(dg, dn) << what << " value " << f << " got " << got;
    if (dg == dn) {
      ASSERT_EQ(got & 1, 0) << what << " tie not to even for " << f;
    }
  }
}

TEST(DtypeConversion, RoundsToNearestEven) {
  const uint64_t seed = flashbox::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Random fp32 bit patterns with exponents around the fp16 range, plus any bf16-range value.
    uint32_t x = bits(rng);
    const float any = bits_float(x);
    if (!std::isnan(any)) expect_nearest_even(any, float_to_bf16(any), bf16_to_float, "bf16");
    x = (x & 0x807fffffu) | (uint32_t(100 + x % 45) << 23);  // exponents 2^-27 .. 2^17
    const float f = bits_float(x);
    expect_nearest_even(f, float_to_half(f), half_to_float, "fp16");
#ifdef __FLT16_MAX__
    const _Float16 c = static_cast<_Float16>(f);
    uint16_t cb;
    std::memcpy(&cb, &c, 2);
    ASSERT_EQ(float_to_half(f), cb) << "value " << f;
#endif
  }
}

TEST(DtypeConversion, SpecialValues) {
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // ties to even -> inf
  EXPECT_EQ(float_to_half(-1e9f), 0xfc00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_EQ(dtype_size(FLASHBOX_FLOAT32), 4);
  EXPECT_EQ(dtype_size(FLASHBOX_BFLOAT16), 2);
  EXPECT_STREQ(dtype_name(FLASHBOX_FLOAT16), "fp16");
}
