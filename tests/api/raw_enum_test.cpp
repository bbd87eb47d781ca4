// Enum fields of the C structs as a C or FFI caller may fill them: any int, including values no
// C++ enum of that type can hold. The library must read them as ints and refuse them with the value
// in the message; reading them as C++ enums is undefined behaviour (fuzz_attention_api found it
// under UBSan). The values are written into the struct as bytes, as a C caller's would be.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>

#include "support/attention_case.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;

namespace {

struct RawEnum {
  const char *field;
  int value;
  int code;
};

void PrintTo(const RawEnum &e, std::ostream *os) { *os << e.field << " = " << e.value; }

class RawEnums : public ::testing::TestWithParam<RawEnum> {};

TEST_P(RawEnums, AreRefusedByValue) {
  AttentionCase c;
  c.batch = 1, c.seqlen_q = 3, c.seqlen_k = 3, c.heads_q = 2, c.heads_kv = 2, c.head_dim = 16;
  AttentionData d(c);
  flashbox_attention_args a = d.args;
  const RawEnum e = GetParam();
  const std::string field = e.field;
  if (field == "device") flashbox::test::store_int(a.device, e.value);
  if (field == "dtype") flashbox::test::store_int(a.dtype, e.value);
  if (field == "impl") flashbox::test::store_int(a.impl, e.value);
  const std::vector<uint8_t> o_before = d.o_bytes();
  EXPECT_EQ(flashbox_attention_forward(&a), e.code);
  const std::string msg = flashbox_last_error();
  EXPECT_NE(msg.find(field + " = " + std::to_string(e.value)), std::string::npos) << msg;
  EXPECT_EQ(d.o_bytes(), o_before);

  flashbox_attention_grad_args g{};
  g.fwd = a;
  EXPECT_EQ(flashbox_attention_backward_workspace_size(&g), -int64_t(e.code));
  EXPECT_EQ(flashbox_attention_backward(&g), e.code);
}

INSTANTIATE_TEST_SUITE_P(Api, RawEnums,
                         ::testing::Values(RawEnum{"dtype", 1313424966, FLASHBOX_ERR_UNSUPPORTED_DTYPE},
                                           RawEnum{"dtype", -2147483647 - 1, FLASHBOX_ERR_UNSUPPORTED_DTYPE},
                                           RawEnum{"impl", 1 << 20, FLASHBOX_ERR_UNSUPPORTED_IMPL},
                                           RawEnum{"device", -7, FLASHBOX_ERR_UNSUPPORTED_IMPL}),
                         [](const auto &info) { return std::string(info.param.field) + std::to_string(info.index); });

}  // namespace
