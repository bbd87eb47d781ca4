// The C++ layer: views build the same arguments as hand-filled ones, results match the fp64
// reference, errors arrive as flashbox::Error with the C API's code and message.
#include <gtest/gtest.h>

#include "flashbox/flashbox.hpp"
#include "support/attention_case.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;
using flashbox::test::Layout;

TEST(CppLayer, ForwardThroughViewsMatchesReference) {
  for (Layout layout : {Layout::BTHD, Layout::BHTD}) {
    AttentionCase c;
    c.batch = 2, c.seqlen_q = 40, c.seqlen_k = 50, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 32;
    c.dtype = FLASHBOX_BFLOAT16, c.causal = 1, c.layout = layout;
    AttentionData d(c);
    auto view = layout == Layout::BTHD ? flashbox::TensorView::bthd : flashbox::TensorView::bhtd;
    const auto q = view(d.args.q, c.dtype, 2, 40, 4, 32), k = view(d.args.k, c.dtype, 2, 50, 2, 32),
               v = view(d.args.v, c.dtype, 2, 50, 2, 32), o = view(d.args.o, c.dtype, 2, 40, 4, 32);
    flashbox::attention_forward(q, k, v, o, {.impl = FLASHBOX_BLOCKED, .causal = true, .lse = d.lse.data()});
    const auto r = d.compare();
    EXPECT_LT(r.rel_error, 1e-2) << d.name();
    EXPECT_LT(r.lse_max_abs_error, 1e-3) << d.name();
    EXPECT_EQ(flashbox::last_call().kernel, "cpu_blocked_64x64");
  }
}

TEST(CppLayer, ErrorsCarryCodeAndMessage) {
  AttentionCase c;
  AttentionData d(c);
  d.args.heads_kv = 3;
  try {
    flashbox::attention_forward(d.args);
    FAIL() << "expected flashbox::Error";
  } catch (const flashbox::Error &e) {
    EXPECT_EQ(e.code(), FLASHBOX_ERR_HEADS_MISMATCH);
    EXPECT_NE(e.message().find("heads_kv = 3"), std::string::npos) << e.message();
    EXPECT_NE(std::string(e.what()).find("FLASHBOX_ERR_HEADS_MISMATCH"), std::string::npos) << e.what();
  }
}

TEST(CppLayer, MismatchedViewsAreRejected) {
  float buf[4 * 8] = {1, 2, 3};
  const auto q = flashbox::TensorView::bthd(buf, FLASHBOX_FLOAT32, 1, 2, 2, 8);
  const auto k = flashbox::TensorView::bthd(buf, FLASHBOX_FLOAT32, 1, 2, 2, 4);
  EXPECT_THROW(flashbox::make_attention_args(q, k, k, q), flashbox::Error);
  const auto k16 = flashbox::TensorView::bthd(buf, FLASHBOX_FLOAT16, 1, 2, 2, 8);
  try {
    flashbox::make_attention_args(q, k16, k16, q);
    FAIL();
  } catch (const flashbox::Error &e) {
    EXPECT_EQ(e.code(), FLASHBOX_ERR_UNSUPPORTED_DTYPE);
  }
}

TEST(CppLayer, NamesAndParsers) {
  EXPECT_STREQ(flashbox::dtype_name(FLASHBOX_BFLOAT16), "bf16");
  EXPECT_EQ(flashbox::parse_dtype("fp16"), FLASHBOX_FLOAT16);
  EXPECT_EQ(flashbox::parse_dtype("bfloat16"), FLASHBOX_BFLOAT16);
  EXPECT_FALSE(flashbox::parse_dtype("int8").has_value());
  EXPECT_EQ(flashbox::parse_impl("blocked"), FLASHBOX_BLOCKED);
  EXPECT_FALSE(flashbox::parse_impl("fast").has_value());
  EXPECT_EQ(flashbox::parse_device("cuda"), FLASHBOX_CUDA);
  EXPECT_STREQ(flashbox::error_code_name(FLASHBOX_ERR_NO_DEVICE), "FLASHBOX_ERR_NO_DEVICE");
}
