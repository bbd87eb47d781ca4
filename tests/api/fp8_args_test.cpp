// The refusals of fp8 e4m3 calls (flashbox_attention_ext's out_dtype and q/k/v_descale): each with its
// code and a message naming the field, nothing written (o, lse); the calls that take no fp8 (the plain
// forward and backward, every backward; device = cuda is not one of them); out_dtype on non-fp8 calls; e5m2 and other
// unknown dtype values; a struct_size from before the fp8 fields never reads them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/mask_case.hpp"

using flashbox::test::expect_call_refused;
using flashbox::test::MaskCase;
using flashbox::test::MaskData;

namespace {

MaskCase fp8_case() {
  MaskCase c;
  c.dtype = FLASHBOX_FLOAT8_E4M3;
  c.batch = 2, c.seqlen_q = 9, c.seqlen_k = 12, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 16, c.causal = 1;
  return c;
}

template <class T>
void set_raw(T &field, int value) {  // an int a C caller may pass where the API declares an enum
  static_assert(sizeof(T) == sizeof(int));
  std::memcpy(&field, &value, sizeof value);
}

using Edit = std::function<void(flashbox_attention_args &, flashbox_attention_ext &, MaskData &)>;

// The fp8 forward of fp8_case() after `edit` returns `code`, its message holding `mentions`, with
// nothing written.
void expect_forward_refused(const char *what, int code, const std::vector<std::string> &mentions, const Edit &edit,
                            MaskCase c = fp8_case()) {
  SCOPED_TRACE(what);
  MaskData d(c);
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  flashbox_attention_ext e = d.ext();
  edit(a, e, d);
  expect_call_refused(
      d, [&] { return flashbox_attention_forward_ext(&a, &e); }, code, mentions);
}

TEST(Fp8Args, ValidCallRuns) {
  MaskData d(fp8_case());
  ASSERT_EQ(d.forward(FLASHBOX_BLOCKED), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_LT(d.o_error().rel, d.tolerance());
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_blocked_64x64_fp8e4m3");
}

TEST(Fp8Args, EveryBadFieldIsNamed) {
  using A = flashbox_attention_args;
  using E = flashbox_attention_ext;
  using D = MaskData;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  expect_forward_refused("out_dtype default (fp32)", FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                         {"out_dtype = fp32", "bf16 or fp16"}, [](A &, E &e, D &) { e.out_dtype = FLASHBOX_FLOAT32; });
  expect_forward_refused("out_dtype fp8", FLASHBOX_ERR_UNSUPPORTED_DTYPE, {"out_dtype = fp8_e4m3"},
                         [](A &, E &e, D &) { e.out_dtype = FLASHBOX_FLOAT8_E4M3; });
  expect_forward_refused("out_dtype 9", FLASHBOX_ERR_UNSUPPORTED_DTYPE, {"out_dtype = 9", "not a flashbox_dtype"},
                         [](A &, E &e, D &) { set_raw(e.out_dtype, 9); });
  for (int which = 0; which < 3; ++which) {
    const std::string name = std::string(1, "qkv"[which]) + "_descale";
    auto ptr = [which](E &e) -> const float *& {
      return which == 0 ? e.q_descale : which == 1 ? e.k_descale : e.v_descale;
    };
    auto stride = [which](E &e) {
      return which == 0 ? e.q_descale_stride : which == 1 ? e.k_descale_stride : e.v_descale_stride;
    };
    for (float bad : {nan, inf, -inf, -0.5f})
      expect_forward_refused((name + " value").c_str(), FLASHBOX_ERR_INVALID_ARGUMENT,
                             {name + "[1, 1]", "finite and >= 0"},
                             [=](A &, E &, D &d) { d.descales(which)[size_t(1 * (2 + 2) + 1)] = bad; });
    expect_forward_refused((name + " misaligned").c_str(), FLASHBOX_ERR_MISALIGNED, {name, "4-byte aligned"},
                           [=](A &, E &e, D &) {
                             ptr(e) = reinterpret_cast<const float *>(reinterpret_cast<const char *>(ptr(e)) + 1);
                           });
    expect_forward_refused((name + " negative stride").c_str(), FLASHBOX_ERR_BAD_STRIDE, {name + "_stride = {-4, 1}"},
                           [=](A &, E &e, D &) { stride(e)[0] = -4; });
    expect_forward_refused((name + " stride without pointer").c_str(), FLASHBOX_ERR_INVALID_ARGUMENT,
                           {name + " is NULL", "pass 0, 0"}, [=](A &, E &e, D &) { ptr(e) = nullptr; });
    expect_forward_refused((name + " inside o").c_str(), FLASHBOX_ERR_INVALID_ARGUMENT, {"overlaps " + name},
                           [=](A &a, E &e, D &) {
                             ptr(e) = static_cast<const float *>(a.o);
                             stride(e)[0] = stride(e)[1] = 0;
                           });
    expect_forward_refused((name + " inside lse").c_str(), FLASHBOX_ERR_INVALID_ARGUMENT, {"overlaps " + name},
                           [=](A &a, E &e, D &) { ptr(e) = a.lse + 3; });
  }
  expect_forward_refused("qv", FLASHBOX_ERR_UNSUPPORTED_IMPL, {"qv", "FLASHBOX_FLOAT8_E4M3"}, [](A &a, E &e, D &) {
    e.qv = a.q;
    std::copy_n(a.q_stride, 3, e.qv_stride);
  });
  // o in bf16 (2 bytes an element) over q's fp8 bytes: the overlap is decided with each one's size.
  expect_forward_refused("o over q", FLASHBOX_ERR_INVALID_ARGUMENT, {"overlap"},
                         [](A &a, E &, D &) { a.q = static_cast<const uint8_t *>(a.o) + 16; });
}

TEST(Fp8Args, ZeroDescaleIsAllowed) {
  MaskData d(fp8_case());
  for (float &s : d.descales(2)) s = 0.0f;  // v = 0: o = 0 where a row sees keys
  ASSERT_EQ(d.forward(FLASHBOX_NAIVE), FLASHBOX_OK) << flashbox_last_error();
  for (size_t i = 0; i < d.o_bytes().size(); i += 2) {
    uint16_t bits;
    std::memcpy(&bits, d.o_bytes().data() + i, 2);
    EXPECT_EQ(bits & 0x7fff, 0) << "element " << i / 2;
  }
}

TEST(Fp8Args, CallsThatTakeNoFp8) {
  MaskData d(fp8_case());
  // The plain forward: no out_dtype there.
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  expect_call_refused(d, [&] { return flashbox_attention_forward(&a); }, FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                      {"FLASHBOX_FLOAT8_E4M3", "flashbox_attention_forward_ext", "out_dtype"});
  // Every backward.
  std::vector<uint8_t> dout(d.o_bytes().size(), 0), dq(256 * 1024), dk(256 * 1024), dv(256 * 1024);
  flashbox_attention_grad_args g{};
  g.fwd = d.forward_args(FLASHBOX_BLOCKED);
  g.dout = dout.data(), g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data();
  std::copy_n(g.fwd.o_stride, 3, g.dout_stride), std::copy_n(g.fwd.q_stride, 3, g.dq_stride);
  std::copy_n(g.fwd.k_stride, 3, g.dk_stride), std::copy_n(g.fwd.v_stride, 3, g.dv_stride);
  flashbox_attention_ext e = d.ext();
  expect_call_refused(d, [&] { return flashbox_attention_backward_ext(&g, &e); }, FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                      {"no backward", "FlashAttention-3"});
  expect_call_refused(d, [&] { return flashbox_attention_backward(&g); }, FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                      {"no backward takes fp8"});
  EXPECT_LT(flashbox_attention_backward_workspace_size(&g), 0);
  // device = cuda takes fp8 (the sm90 fp8 forward): these host buffers fail for another reason (a
  // build without CUDA, no GPU, host memory), never as a cpu-only field, and nothing is written.
  a = d.forward_args(FLASHBOX_AUTO);
  a.device = FLASHBOX_CUDA;
  flashbox::test::expect_cuda_takes(d, [&] { return flashbox_attention_forward_ext(&a, &e); }, "fp8");
}

TEST(Fp8Args, UnknownDtypesNameE5m2) {
  MaskData d(fp8_case());
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  set_raw(a.dtype, 4);
  flashbox_attention_ext e = d.ext();
  expect_call_refused(d, [&] { return flashbox_attention_forward_ext(&a, &e); }, FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                      {"dtype = 4", "e5m2 is not supported"});
}

TEST(Fp8Args, FieldsOfNonFp8Calls) {
  MaskCase c;
  c.dtype = FLASHBOX_BFLOAT16;
  MaskData d(c);
  const float one = 1.0f;
  auto refused = [&](const char *what, int code, const std::vector<std::string> &mentions,
                     const std::function<void(flashbox_attention_ext &)> &edit) {
    SCOPED_TRACE(what);
    flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
    flashbox_attention_ext e = d.ext();
    edit(e);
    expect_call_refused(
        d, [&] { return flashbox_attention_forward_ext(&a, &e); }, code, mentions);
  };
  refused("out_dtype fp16 on bf16", FLASHBOX_ERR_UNSUPPORTED_DTYPE, {"out_dtype = fp16 differs from dtype = bf16"},
          [](flashbox_attention_ext &e) { e.out_dtype = FLASHBOX_FLOAT16; });
  refused("k_descale on bf16", FLASHBOX_ERR_INVALID_ARGUMENT, {"k_descale is set but dtype = bf16"},
          [&](flashbox_attention_ext &e) { e.k_descale = &one; });
  refused("v_descale_stride on bf16", FLASHBOX_ERR_INVALID_ARGUMENT, {"v_descale_stride = {0, 1}"},
          [](flashbox_attention_ext &e) { e.v_descale_stride[1] = 1; });
  // out_dtype = dtype is the same request as 0: the plain call.
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  ASSERT_EQ(flashbox_attention_forward(&a), FLASHBOX_OK) << flashbox_last_error();
  const std::vector<uint8_t> plain = d.o_bytes();
  a = d.forward_args(FLASHBOX_BLOCKED);
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.out_dtype = FLASHBOX_BFLOAT16;
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(plain == d.o_bytes());
  EXPECT_STREQ(flashbox_last_kernel(), "cpu_blocked_64x64");
}

// A caller compiled before the fp8 fields: whatever lies past its struct_size is never read, so a
// bf16 call runs as before and an fp8 call finds out_dtype = 0 (refused, naming the default).
TEST(Fp8Args, OlderStructSizeNeverReadsTheFields) {
  const int32_t old_size = int32_t(offsetof(flashbox_attention_ext, out_dtype));
  MaskCase c;
  c.dtype = FLASHBOX_BFLOAT16;
  MaskData d(c);
  flashbox_attention_args a = d.forward_args(FLASHBOX_BLOCKED);
  ASSERT_EQ(flashbox_attention_forward(&a), FLASHBOX_OK);
  const std::vector<uint8_t> plain = d.o_bytes();
  flashbox_attention_ext e = flashbox_attention_ext_default();
  e.struct_size = old_size;
  set_raw(e.out_dtype, 77);
  e.q_descale = reinterpret_cast<const float *>(uintptr_t(3));  // garbage a new library must not read
  e.k_descale_stride[0] = -9;
  a = d.forward_args(FLASHBOX_BLOCKED);
  ASSERT_EQ(flashbox_attention_forward_ext(&a, &e), FLASHBOX_OK) << flashbox_last_error();
  EXPECT_TRUE(plain == d.o_bytes());

  MaskData f(fp8_case());
  flashbox_attention_ext fe = f.ext();
  fe.struct_size = old_size;
  a = f.forward_args(FLASHBOX_BLOCKED);
  expect_call_refused(f, [&] { return flashbox_attention_forward_ext(&a, &fe); }, FLASHBOX_ERR_UNSUPPORTED_DTYPE,
                      {"out_dtype = fp32 (0, the default)"});
}

}  // namespace
