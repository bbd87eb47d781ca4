// Bad fields of flashbox_attention_ext: each refused with its own code and a message naming the
// field and its value, nothing written to o / lse or dq / dk / dv; struct_size growth rules; the
// extension off (NULL, or every field off) is exactly the plain call; cuda refuses what it lacks.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "support/mask_case.hpp"

using flashbox::test::MaskCase;
using flashbox::test::MaskData;

namespace {

MaskCase varlen_case() {
  MaskCase c;
  c.lens_q = {5, 0, 9}, c.lens_k = {7, 3, 9}, c.heads_q = 2, c.heads_kv = 1, c.head_dim = 16, c.alibi = 2;
  return c;
}

using Edit = std::function<void(flashbox_attention_args &, flashbox_attention_ext &, MaskData &)>;

struct BadField {
  const char *what;
  int code;
  std::vector<std::string> mentions;
  Edit edit;
};

void expect_refused(const BadField &b, MaskCase c = varlen_case()) {
  SCOPED_TRACE(b.what);
  MaskData d(c);
  // Forward.
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  flashbox_attention_ext e = d.ext();
  b.edit(a, e, d);
  std::vector<uint8_t> before = d.outputs_snapshot();
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), b.code) << flashbox_last_error();
  std::string msg = flashbox_last_error();
  for (const std::string &m : b.mentions) EXPECT_NE(msg.find(m), std::string::npos) << "'" << m << "' not in: " << msg;
  EXPECT_TRUE(before == d.outputs_snapshot()) << "forward wrote an output on failure";
  // Backward, the same edit on its forward arguments.
  flashbox_attention_grad_args g = d.grad_args(FLASHBOX_BLOCKED);
  e = d.ext();
  b.edit(g.fwd, e, d);
  before = d.outputs_snapshot();
  EXPECT_EQ(flashbox_attention_backward_ext(&g, &e), b.code) << flashbox_last_error();
  msg = flashbox_last_error();
  for (const std::string &m : b.mentions) EXPECT_NE(msg.find(m), std::string::npos) << "'" << m << "' not in: " << msg;
  EXPECT_TRUE(before == d.outputs_snapshot()) << "backward wrote an output on failure";
}

TEST(ExtArgs, ValidCaseRuns) {
  MaskData d(varlen_case());
  ASSERT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
  ASSERT_EQ(d.backward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
}

TEST(ExtArgs, EveryBadFieldIsNamed) {
  using A = flashbox_attention_args;
  using E = flashbox_attention_ext;
  using D = MaskData;
  const BadField cases[] = {
      {"struct_size small",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"struct_size = 8"},
       [](A &, E &e, D &) { e.struct_size = 8; }},
      {"struct_size garbage",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"struct_size = 100000"},
       [](A &, E &e, D &) { e.struct_size = 100000; }},
      {"window_left -2",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"window_left = -2"},
       [](A &, E &e, D &) { e.window_left = -2; }},
      {"window_right -7",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"window_right = -7"},
       [](A &, E &e, D &) { e.window_right = -7; }},
      {"window_right with causal",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"window_right = 3", "causal"},
       [](A &a, E &e, D &) { a.causal = 1, e.window_right = 3; }},
      {"softcap negative", FLASHBOX_ERR_INVALID_ARGUMENT, {"softcap = -1"}, [](A &, E &e, D &) { e.softcap = -1.0f; }},
      {"softcap nan", FLASHBOX_ERR_INVALID_ARGUMENT, {"softcap = nan"}, [](A &, E &e, D &) { e.softcap = NAN; }},
      {"alibi stride small",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"alibi_batch_stride = 1", "heads_q = 2"},
       [](A &, E &e, D &) { e.alibi_batch_stride = 1; }},
      {"alibi stride without slopes",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"alibi_batch_stride = 5", "NULL"},
       [](A &, E &e, D &) { e.alibi_slopes = nullptr, e.alibi_batch_stride = 5; }},
      {"alibi misaligned",
       FLASHBOX_ERR_MISALIGNED,
       {"alibi_slopes", "4-byte"},
       [](A &, E &e, D &) {
         e.alibi_slopes = reinterpret_cast<const float *>(reinterpret_cast<const char *>(e.alibi_slopes) + 1);
       }},
      {"alibi slope inf",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"alibi_slopes[", "must be finite"},
       [](A &, E &, D &d) { d.slopes()[1] = INFINITY; }},
      {"only cu_seqlens_q",
       FLASHBOX_ERR_NULL_POINTER,
       {"cu_seqlens_k is NULL"},
       [](A &, E &e, D &) { e.cu_seqlens_k = nullptr; }},
      {"cu_seqlens_q[0] not 0",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"cu_seqlens_q[0] = 1"},
       [](A &, E &, D &d) { d.cu_q()[0] = 1; }},
      {"cu_seqlens_k decreasing",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"cu_seqlens_k[2] = 6", "less than"},
       [](A &, E &, D &d) { d.cu_k()[2] = 6; }},
      {"total mismatch",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"cu_seqlens_q[batch = 3] = 14", "seqlen_q = 13"},
       [](A &a, E &, D &) { a.seqlen_q = 13; }},
      {"max_seqlen too small",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"max_seqlen_k = 8", "length 9", "sequence 2"},
       [](A &, E &e, D &) { e.max_seqlen_k = 8; }},
      {"max_seqlen negative",
       FLASHBOX_ERR_INVALID_SIZE,
       {"max_seqlen_q = -1"},
       [](A &, E &e, D &) { e.max_seqlen_q = -1; }},
      {"max_seqlen without varlen",
       FLASHBOX_ERR_INVALID_ARGUMENT,
       {"max_seqlen_q = 4", "only meaningful"},
       [](A &a, E &e, D &) {
         e.cu_seqlens_q = e.cu_seqlens_k = nullptr, e.max_seqlen_q = 4;
         a.batch = 1;  // a plain [1, total, ...] call otherwise
       }},
  };
  for (const BadField &b : cases) expect_refused(b);
}

TEST(ExtArgs, StructSizeGrowth) {
  MaskData d(varlen_case());
  const flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  // A newer caller's larger struct: accepted when the bytes this library does not know are zero.
  struct Newer {
    flashbox_attention_ext e;
    int64_t future_field;
  } n{};
  n.e = d.ext();
  n.e.struct_size = int32_t(sizeof n);
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &n.e), FLASHBOX_OK) << flashbox_last_error();
  n.future_field = 1;
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &n.e), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("does not know"), std::string::npos) << flashbox_last_error();
}

TEST(ExtArgs, OffIsThePlainCall) {
  MaskCase c;
  c.causal = 1;
  MaskData d(c);
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  ASSERT_EQ(flashbox_attention_forward(&a), FLASHBOX_OK);
  const std::vector<uint8_t> plain = d.o_bytes();
  const std::vector<float> plain_lse = d.lse();
  a = d.forward_args(FLASHBOX_BLOCKED);
  ASSERT_EQ(flashbox_attention_forward_ext(&a, nullptr), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(plain == d.o_bytes());
  a = d.forward_args(FLASHBOX_BLOCKED);
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.window_right = 0;  // with causal: the same call
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(plain == d.o_bytes());
  EXPECT_EQ(std::memcmp(plain_lse.data(), d.lse().data(), plain_lse.size() * 4), 0);
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_blocked_64x64");
  EXPECT_EQ(flashbox_attention_forward_ext(nullptr, &e), FLASHBOX_ERR_NULL_POINTER);
}

TEST(ExtArgs, CudaWithoutGpuSaysSo) {
  // The extension's fields pass their own rules; the cuda call then fails as the plain one does
  // where there is no GPU (or no CUDA build), never as if the fields were accepted and ignored.
  if (flashbox_cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present: tests/cuda cover the cuda backends";
  MaskCase c;
  c.dtype = FLASHBOX_BFLOAT16, c.head_dim = 64, c.batch = 1, c.seqlen_q = 8, c.seqlen_k = 8;
  MaskData d(c);
  const std::pair<const char *, std::function<void(flashbox_attention_ext &)>> fields[] = {
      {"window_left = 4", [](flashbox_attention_ext &e) { e.window_left = 4; }},
      {"window_right = 2", [](flashbox_attention_ext &e) { e.window_right = 2; }},
      {"softcap = 5", [](flashbox_attention_ext &e) { e.softcap = 5.0f; }},
  };
  for (const auto &[name, edit] : fields) {
    flashbox_attention_args a = d.forward_args(FLASHBOX_AUTO);
    a.device = FLASHBOX_CUDA;
    flashbox_attention_ext e = flashbox_attention_ext_default();
    edit(e);
    EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_ERR_NO_DEVICE) << name << ": " << flashbox_last_error();
    EXPECT_NE(std::string(flashbox_last_error()).find("cuda"), std::string::npos) << flashbox_last_error();
  }
}

TEST(ExtArgs, OutputOnTheSlopesIsRefused) {
  // lse placed on the slope buffer: the exact overlap test sees it, the call is refused.
  MaskCase c;
  c.alibi = 1, c.heads_q = 2, c.heads_kv = 2, c.batch = 1, c.seqlen_q = 4, c.seqlen_k = 4;
  MaskData d(c);
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  flashbox_attention_ext e = d.ext();
  std::vector<float> shared(64, 0.25f);
  e.alibi_slopes = shared.data();
  a.lse = shared.data() + 1;
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("overlaps alibi_slopes"), std::string::npos)
      << flashbox_last_error();
  a.lse = shared.data() + 2;  // right after the two slopes: disjoint
  EXPECT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
}

}  // namespace
