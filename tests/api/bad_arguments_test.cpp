// Every bad input of the C API: the call returns its own code, the message names the argument and
// its value, and nothing is written to o or lse (their bytes are compared before and after).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/attention_case.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;
using flashbox::test::Layout;

namespace {

class BadArguments : public ::testing::Test {
 protected:
  BadArguments() : data_(make_case()) {}

  static AttentionCase make_case() {
    AttentionCase c;
    c.batch = 2, c.seqlen_q = 5, c.seqlen_k = 7, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64;
    c.dtype = FLASHBOX_FLOAT16, c.layout = Layout::PADDED;  // valid for CUDA too, but for the device
    return c;
  }

  // Applies `mutate` to a copy of valid arguments, calls the API and checks code, message, outputs.
  void expect_rejected(const std::function<void(flashbox_attention_args &)> &mutate, int code,
                       std::vector<std::string> in_message) {
    flashbox_attention_args a = data_.args;
    mutate(a);
    const std::vector<uint8_t> o_before = data_.o_bytes();
    const std::vector<float> lse_before = data_.lse;
    const std::vector<uint8_t> q_before = data_.q_bytes();
    const int rc = flashbox_attention_forward(&a);
    const std::string msg = flashbox_last_error();
    EXPECT_EQ(rc, code) << "message: " << msg;
    for (const std::string &part : in_message)
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
    EXPECT_EQ(data_.o_bytes(), o_before) << "o written on failure";
    EXPECT_EQ(std::memcmp(data_.lse.data(), lse_before.data(), lse_before.size() * 4), 0) << "lse written on failure";
    EXPECT_EQ(data_.q_bytes(), q_before);
  }

  AttentionData data_;
};

TEST_F(BadArguments, ValidArgumentsPass) {
  // The baseline the other cases mutate must itself be accepted, with lse or without.
  flashbox_attention_args a = data_.args;
  EXPECT_EQ(flashbox_attention_forward(&a), FLASHBOX_OK) << flashbox_last_error();
  a.lse = nullptr;
  EXPECT_EQ(flashbox_attention_forward(&a), FLASHBOX_OK) << flashbox_last_error();
}

TEST_F(BadArguments, NullPointers) {
  EXPECT_EQ(flashbox_attention_forward(nullptr), FLASHBOX_ERR_NULL_POINTER);
  EXPECT_NE(std::string(flashbox_last_error()).find("args"), std::string::npos);
  expect_rejected([](auto &a) { a.q = nullptr; }, FLASHBOX_ERR_NULL_POINTER, {"q is NULL"});
  expect_rejected([](auto &a) { a.k = nullptr; }, FLASHBOX_ERR_NULL_POINTER, {"k is NULL"});
  expect_rejected([](auto &a) { a.v = nullptr; }, FLASHBOX_ERR_NULL_POINTER, {"v is NULL"});
  expect_rejected([](auto &a) { a.o = nullptr; }, FLASHBOX_ERR_NULL_POINTER, {"o is NULL"});
}

TEST_F(BadArguments, SizesMustBePositive) {
  expect_rejected([](auto &a) { a.batch = 0; }, FLASHBOX_ERR_INVALID_SIZE, {"batch = 0"});
  expect_rejected([](auto &a) { a.seqlen_q = -1; }, FLASHBOX_ERR_INVALID_SIZE, {"seqlen_q = -1"});
  expect_rejected([](auto &a) { a.seqlen_k = 0; }, FLASHBOX_ERR_INVALID_SIZE, {"seqlen_k = 0"});
  expect_rejected([](auto &a) { a.heads_q = 0; }, FLASHBOX_ERR_INVALID_SIZE, {"heads_q = 0"});
  expect_rejected([](auto &a) { a.heads_kv = -3; }, FLASHBOX_ERR_INVALID_SIZE, {"heads_kv = -3"});
  expect_rejected([](auto &a) { a.head_dim = 0; }, FLASHBOX_ERR_INVALID_SIZE, {"head_dim = 0"});
}

TEST_F(BadArguments, CountsThatOverflowInt64) {
  expect_rejected([](auto &a) { a.batch = int64_t(1) << 40, a.seqlen_q = int64_t(1) << 30; },
                  FLASHBOX_ERR_SIZE_OVERFLOW, {"batch = 1099511627776", "overflows"});
  expect_rejected([](auto &a) { a.seqlen_k = int64_t(1) << 60; }, FLASHBOX_ERR_SIZE_OVERFLOW,
                  {"seqlen_k", "overflows"});
  expect_rejected([](auto &a) { a.q_stride[0] = std::numeric_limits<int64_t>::max() / 2; }, FLASHBOX_ERR_SIZE_OVERFLOW,
                  {"q", "overflows"});
}

TEST_F(BadArguments, HeadsNotAMultiple) {
  expect_rejected([](auto &a) { a.heads_kv = 3; }, FLASHBOX_ERR_HEADS_MISMATCH, {"heads_q = 4", "heads_kv = 3"});
}

TEST_F(BadArguments, UnsupportedHeadDim) {
  expect_rejected([](auto &a) { a.head_dim = 600; }, FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, {"head_dim = 600", "cpu", "1..576"});
  // CUDA rules are checked before the device is looked for, so they hold on any machine.
  expect_rejected([](auto &a) { a.device = FLASHBOX_CUDA, a.head_dim = 100; }, FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                  {"head_dim = 100", "cuda", "multiples of 8 up to 256"});
  expect_rejected([](auto &a) { a.device = FLASHBOX_CUDA, a.head_dim = 252; }, FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                  {"head_dim = 252", "cuda", "multiples of 8 up to 256"});
  expect_rejected([](auto &a) { a.device = FLASHBOX_CUDA, a.head_dim = 264; }, FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM,
                  {"head_dim = 264", "multiples of 8 up to 256"});
  expect_rejected([](auto &a) { a.device = FLASHBOX_CUDA, a.impl = FLASHBOX_NAIVE, a.head_dim = 12; },
                  FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM, {"head_dim = 12", "naive"});
}

TEST_F(BadArguments, UnsupportedDtype) {
  expect_rejected([](auto &a) { a.dtype = static_cast<flashbox_dtype>(7); }, FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                  {"dtype = 7"});
  expect_rejected([](auto &a) { a.device = FLASHBOX_CUDA, a.dtype = FLASHBOX_FLOAT32; }, FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                  {"dtype = fp32", "cuda"});
}

TEST_F(BadArguments, UnsupportedImplOrDevice) {
  expect_rejected([](auto &a) { a.impl = static_cast<flashbox_impl>(9); }, FLASHBOX_ERR_UNSUPPORTED_IMPL, {"impl = 9"});
  expect_rejected([](auto &a) { a.impl = static_cast<flashbox_impl>(-1); }, FLASHBOX_ERR_UNSUPPORTED_IMPL,
                  {"impl = -1"});
  expect_rejected([](auto &a) { a.device = static_cast<flashbox_device>(5); }, FLASHBOX_ERR_UNSUPPORTED_IMPL,
                  {"device = 5"});
  expect_rejected([](auto &a) { a.impl = FLASHBOX_FLASH; }, FLASHBOX_ERR_UNSUPPORTED_IMPL, {"impl = flash", "cpu"});
  expect_rejected([](auto &a) { a.device = FLASHBOX_CUDA, a.impl = FLASHBOX_BLOCKED; }, FLASHBOX_ERR_UNSUPPORTED_IMPL,
                  {"impl = blocked", "cuda"});
}

TEST_F(BadArguments, StridesNotPositive) {
  expect_rejected([](auto &a) { a.q_stride[1] = 0; }, FLASHBOX_ERR_BAD_STRIDE, {"q_stride[1]", "= 0"});
  expect_rejected([](auto &a) { a.k_stride[2] = -16; }, FLASHBOX_ERR_BAD_STRIDE, {"k_stride[2]", "= -16"});
  expect_rejected([](auto &a) { a.o_stride[0] = -1; }, FLASHBOX_ERR_BAD_STRIDE, {"o_stride[0]", "= -1"});
}

TEST_F(BadArguments, StridesThatOverlap) {
  // Heads closer than head_dim: two heads would share elements.
  expect_rejected([](auto &a) { a.v_stride[2] = 8; }, FLASHBOX_ERR_BAD_STRIDE, {"v_stride[2]", "= 8", "overlap"});
  // Rows closer than heads x head stride: row i's last head is row i+1's first.
  expect_rejected([](auto &a) { a.o_stride[1] = 2 * a.o_stride[2]; }, FLASHBOX_ERR_BAD_STRIDE,
                  {"o_stride[1]", "overlap"});
  // Batches closer than the rows of one batch.
  expect_rejected([](auto &a) { a.q_stride[0] = a.q_stride[1] * 2; }, FLASHBOX_ERR_BAD_STRIDE,
                  {"q_stride[0]", "overlap"});
}

TEST_F(BadArguments, OutputsOverlappingInputs) {
  expect_rejected([](auto &a) { a.o = const_cast<void *>(a.k); }, FLASHBOX_ERR_INVALID_ARGUMENT,
                  {"o = ", "overlaps k"});
  expect_rejected([](auto &a) { a.lse = static_cast<float *>(a.o) + 4; }, FLASHBOX_ERR_INVALID_ARGUMENT,
                  {"lse", "overlaps o"});
}

TEST_F(BadArguments, MisalignedPointers) {
  expect_rejected([](auto &a) { a.q = static_cast<const char *>(a.q) + 1; }, FLASHBOX_ERR_MISALIGNED,
                  {"q = ", "aligned"});
  expect_rejected([](auto &a) { a.lse = reinterpret_cast<float *>(reinterpret_cast<char *>(a.lse) + 2); },
                  FLASHBOX_ERR_MISALIGNED, {"lse", "4-byte"});
  // CUDA: 16-byte pointers and strides in multiples of 8 half-precision elements.
  expect_rejected([](auto &a) { a.device = FLASHBOX_CUDA, a.v = static_cast<const char *>(a.v) + 2; },
                  FLASHBOX_ERR_MISALIGNED, {"v = ", "16-byte"});
  expect_rejected(
      [](auto &a) {
        a.device = FLASHBOX_CUDA;
        a.k_stride[1] += 4, a.k_stride[0] *= 2;  // rows 4 elements apart from 16-byte boundaries
      },
      FLASHBOX_ERR_MISALIGNED, {"k_stride[1]", "multiple of 8"});
}

TEST_F(BadArguments, CausalAndScaleValues) {
  expect_rejected([](auto &a) { a.causal = 2; }, FLASHBOX_ERR_INVALID_ARGUMENT, {"causal = 2"});
  expect_rejected([](auto &a) { a.causal = -1; }, FLASHBOX_ERR_INVALID_ARGUMENT, {"causal = -1"});
  expect_rejected([](auto &a) { a.softmax_scale = std::nanf(""); }, FLASHBOX_ERR_INVALID_ARGUMENT,
                  {"softmax_scale = nan"});
  expect_rejected([](auto &a) { a.softmax_scale = INFINITY; }, FLASHBOX_ERR_INVALID_ARGUMENT, {"softmax_scale = inf"});
  expect_rejected([](auto &a) { a.softmax_scale = -0.5f; }, FLASHBOX_ERR_INVALID_ARGUMENT, {"softmax_scale = -0.5"});
}

TEST_F(BadArguments, CudaWithoutDevice) {
  if (flashbox_cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present; this case needs a machine without one";
  // Everything else valid for CUDA (fp16, head_dim 64, 16-byte aligned, strides multiples of 8).
  AttentionCase c;
  c.dtype = FLASHBOX_FLOAT16, c.head_dim = 64, c.device = FLASHBOX_CUDA, c.seqlen_q = 3, c.seqlen_k = 3;
  AttentionData d(c);
  const std::vector<uint8_t> o_before = d.o_bytes();
  EXPECT_EQ(flashbox_attention_forward(&d.args), FLASHBOX_ERR_NO_DEVICE);
  EXPECT_NE(std::string(flashbox_last_error()).find("device = cuda"), std::string::npos) << flashbox_last_error();
  EXPECT_EQ(d.o_bytes(), o_before);
}

}  // namespace
