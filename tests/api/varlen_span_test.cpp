// The device-side rule for variable-length batches (src/cuda/common/varlen_span.cuh, documented in
// flashbox.h): the CUDA kernels do not check cu_seqlens, they clamp each sequence's span so that no
// access leaves the packed tensors. Checked here on the host, where the same function compiles:
// well-formed prefix sums are read as they are; every malformed one (negative, decreasing, past the
// total, longer than max_seqlen) gives a span inside [0, total) no longer than max_seqlen.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/common/varlen_span.cuh"

namespace {

using flashbox::cuda::varlen_span;

TEST(VarlenSpan, WellFormedPrefixSumsAreReadAsTheyAre) {
  const std::vector<int32_t> cu_q = {0, 0, 1, 18, 82}, cu_k = {0, 5, 5, 22, 85};
  for (int b = 0; b < 4; ++b) {
    const auto s = varlen_span(cu_q.data(), cu_k.data(), b, 82, 85, 64, 63);
    EXPECT_EQ(s.q0, cu_q[b]);
    EXPECT_EQ(s.seqlen_q, cu_q[b + 1] - cu_q[b]);
    EXPECT_EQ(s.k0, cu_k[b]);
    EXPECT_EQ(s.seqlen_k, cu_k[b + 1] - cu_k[b]);
  }
}

TEST(VarlenSpan, MalformedPrefixSumsStayInsideTheTensors) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> any(-100, 300);
  for (int trial = 0; trial < 20000; ++trial) {
    const int total = int(rng() % 200), max_len = int(rng() % 80);
    const int32_t cu[2] = {any(rng), any(rng)};
    const auto s = varlen_span(cu, cu, 0, total, total, max_len, max_len);
    ASSERT_GE(s.q0, 0);
    ASSERT_GE(s.seqlen_q, 0);
    ASSERT_LE(s.seqlen_q, max_len);
    ASSERT_LE(s.q0 + s.seqlen_q, total) << "cu = {" << cu[0] << ", " << cu[1] << "}, total " << total;
    ASSERT_EQ(s.k0, s.q0);
    ASSERT_EQ(s.seqlen_k, s.seqlen_q);
  }
  // The named cases: negative start, decreasing, past the total, longer than max_seqlen.
  const int32_t neg[2] = {-5, 3}, dec[2] = {10, 4}, past[2] = {90, 500}, longer[2] = {0, 100};
  EXPECT_EQ(varlen_span(neg, neg, 0, 50, 50, 64, 64).q0, 0);
  EXPECT_EQ(varlen_span(neg, neg, 0, 50, 50, 64, 64).seqlen_q, 3);
  EXPECT_EQ(varlen_span(dec, dec, 0, 50, 50, 64, 64).seqlen_q, 0);
  EXPECT_EQ(varlen_span(past, past, 0, 50, 50, 64, 64).q0, 50);
  EXPECT_EQ(varlen_span(past, past, 0, 50, 50, 64, 64).seqlen_q, 0);
  EXPECT_EQ(varlen_span(longer, longer, 0, 200, 200, 64, 64).seqlen_q, 64);
}

}  // namespace
