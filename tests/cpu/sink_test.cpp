// flashbox_attention_ext.learnable_sink (FlashAttention-4's learnable_sink, gpt-oss's attention sinks)
// on the CPU levels (naive and blocked, forward and backward with dsink, both deterministic modes)
// against the fp64 reference on fresh random inputs (seed printed): causal and not, windows that
// leave rows without a key (O = 0, LSE = the sink), GQA, softcap, variable length, chunk, bf16; the
// sink against FlashAttention-4's test reference (attention with the sink as one more key column whose
// value is 0, that column dropped); bad values refused with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/attention_case.hpp"
#include "support/mask_case.hpp"

using flashbox::test::check_cpu_levels;
using flashbox::test::MaskCase;
using flashbox::test::MaskData;

namespace {

TEST(Sink, ForwardBackward) {
  const int64_t shapes[][2] = {{70, 70}, {45, 130}, {130, 45}, {1, 33}};
  for (const auto &s : shapes)
    for (int causal : {0, 1}) {
      MaskCase c;
      c.seqlen_q = s[0], c.seqlen_k = s[1], c.causal = causal, c.heads_q = 4, c.heads_kv = 2, c.sink = true;
      check_cpu_levels(c);
    }
}

TEST(Sink, RowsWithoutKeysAndTransforms) {
  // A window that leaves the first rows keyless (seqlen_q > seqlen_k, causal), softcap, chunk, bf16.
  MaskCase c;
  c.seqlen_q = 90, c.seqlen_k = 40, c.causal = 1, c.window_left = 8, c.softcap = 4.0f, c.heads_q = 3;
  c.heads_kv = 1, c.sink = true;
  check_cpu_levels(c);
  c.attention_chunk = 16, c.softcap = 0.0f, c.dtype = FLASHBOX_BFLOAT16, c.seed = flashbox::test::fresh_seed();
  check_cpu_levels(c);
}

TEST(Sink, VariableLengthAndSeqused) {
  MaskCase c;
  c.lens_q = {17, 0, 80, 5, 64};
  c.lens_k = {20, 9, 100, 0, 64};
  c.used_q = {17, 0, 41, 5, 1};
  c.heads_q = 4, c.heads_kv = 2, c.head_dim = 24, c.causal = 1, c.sink = true;
  check_cpu_levels(c);
}

TEST(Sink, EqualsAZeroValuedKeyColumn) {
  // FlashAttention-4's reference: the sink as one more key whose score is the sink logit and whose
  // value is 0; attention over seqlen_k + 1 keys, then that column dropped, gives the same O.
  MaskCase c;
  c.batch = 1, c.seqlen_q = 5, c.seqlen_k = 9, c.heads_q = 2, c.heads_kv = 2, c.head_dim = 8, c.sink = true;
  MaskData d(c);
  ASSERT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
  const flashbox_attention_ext &e = d.ext();
  const flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);  // host q, k, v (fp32 BTHD)
  ASSERT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
  const auto *q = static_cast<const float *>(a.q), *k = static_cast<const float *>(a.k);
  const auto *v = static_cast<const float *>(a.v);
  const auto *o = reinterpret_cast<const float *>(d.o_bytes().data());
  const double scale = 1.0 / std::sqrt(8.0);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      std::vector<double> s;
      for (int64_t j = 0; j < 9; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < 8; ++x) dot += double(q[(i * 2 + h) * 8 + x]) * k[(j * 2 + h) * 8 + x];
        s.push_back(dot * scale);
      }
      s.push_back(e.learnable_sink[h]);  // the extra column, value 0
      double mx = s[0], z = 0;
      for (double x : s) mx = std::max(mx, x);
      for (double x : s) z += std::exp(x - mx);
      for (int64_t x = 0; x < 8; ++x) {
        double want = 0;
        for (int64_t j = 0; j < 9; ++j) want += std::exp(s[size_t(j)] - mx) / z * v[(j * 2 + h) * 8 + x];
        EXPECT_NEAR(o[(i * 2 + h) * 8 + x], want, 1e-5) << "head " << h << " row " << i << " column " << x;
      }
      EXPECT_NEAR(d.lse()[size_t(h * 5 + i)], mx + std::log(z), 1e-5);
    }
}

TEST(SinkArgs, BadValuesAreNamed) {
  MaskCase c;
  c.seqlen_q = 17, c.seqlen_k = 17, c.heads_q = 2, c.heads_kv = 1, c.sink = true;
  MaskData d(c);
  auto refused_forward = [&](const flashbox_attention_args &a, const flashbox_attention_ext &e, int code,
                             const std::string &mention) {
    const std::vector<uint8_t> before = d.outputs_snapshot();
    EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), code) << flashbox_last_error();
    EXPECT_NE(std::string(flashbox_last_error()).find(mention), std::string::npos) << flashbox_last_error();
    EXPECT_TRUE(before == d.outputs_snapshot()) << "a refused call wrote an output";
  };
  const flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  std::vector<float> bad = {0.5f, NAN};
  flashbox_attention_ext e = d.ext();
  e.learnable_sink = bad.data();
  refused_forward(a, e, FLASHBOX_ERR_INVALID_ARGUMENT, "learnable_sink[1] = nan");
  e = d.ext();
  e.learnable_sink = nullptr;  // dsink without sinks
  refused_forward(a, e, FLASHBOX_ERR_INVALID_ARGUMENT, "dsink is set but learnable_sink is NULL");
  // device = cuda takes sinks (tests/cuda/sink_cuda_test.cpp): this call of host buffers is refused
  // for its device or its pointers, never for the sink, and writes nothing.
  flashbox_attention_args cuda = a;
  cuda.device = FLASHBOX_CUDA, cuda.dtype = FLASHBOX_BFLOAT16;
  {
    const std::vector<uint8_t> before = d.outputs_snapshot();
    EXPECT_NE(flashbox_attention_forward_ext(&cuda, &d.ext()), FLASHBOX_OK);
    EXPECT_EQ(std::string(flashbox_last_error()).find("learnable_sink"), std::string::npos) << flashbox_last_error();
    EXPECT_TRUE(before == d.outputs_snapshot()) << "a refused call wrote an output";
  }
  // The backward needs dsink, and dsink may not share bytes with an input.
  flashbox_attention_grad_args g = d.grad_args(FLASHBOX_BLOCKED);
  e = d.ext();
  e.dsink = nullptr;
  EXPECT_EQ(flashbox_attention_backward_ext(&g, &e), FLASHBOX_ERR_NULL_POINTER);
  EXPECT_NE(std::string(flashbox_last_error()).find("dsink is NULL"), std::string::npos) << flashbox_last_error();
  e = d.ext();
  e.dsink = const_cast<float *>(static_cast<const float *>(g.fwd.q));
  EXPECT_EQ(flashbox_attention_backward_ext(&g, &e), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("dsink overlaps q"), std::string::npos) << flashbox_last_error();
}

}  // namespace
