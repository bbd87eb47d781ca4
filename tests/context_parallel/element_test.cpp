// libflashbox_cp's own element conversions (src/context_parallel/element.hpp) round exactly as the
// project's (the test support's, which the kernels' tests are held to): every fp16 and bf16 bit
// pattern read, and fp32 values written, ties, subnormals, overflow and NaN among them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "context_parallel/element.hpp"
#include "support/attention_case.hpp"

namespace flashbox::cp {
namespace {

float bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Element, ReadsEveryHalfAndBf16Pattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = uint16_t(b);
    for (flashbox_dtype t : {FLASHBOX_FLOAT16, FLASHBOX_BFLOAT16}) {
      const float got = load_element(&h, t, 0), want = cpu::load_as_float(&h, t, 0);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got)) << b;
      else
        EXPECT_EQ(got, want) << "dtype " << t << " bits " << b;
    }
  }
}

TEST(Element, WritesRoundToNearestEven) {
  std::mt19937 rng(7);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               65504.0f,
                               65520.0f,
                               1e-8f,
                               6e-8f,
                               3e-5f,
                               -2.5e-6f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               3.4e38f};
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x3f800001u, 0x7f7fffffu, 0x00000001u, 0x387fe000u})
    values.push_back(bits(u));  // bf16 and fp16 ties, the largest float, subnormals
  for (int i = 0; i < 200000; ++i) values.push_back(bits(rng()));
  for (float v : values)
    for (flashbox_dtype t : {FLASHBOX_FLOAT16, FLASHBOX_BFLOAT16}) {
      uint16_t got = 0, want = 0;
      store_element(&got, t, 0, v);
      cpu::store_from_float(&want, t, 0, v);
      if (std::isnan(v))
        EXPECT_TRUE(std::isnan(cpu::load_as_float(&got, t, 0)));
      else
        EXPECT_EQ(got, want) << "dtype " << t << " value " << v;
    }
}

}  // namespace
}  // namespace flashbox::cp
