// The GPU forward against the fp64 reference, through the public C API, for NAIVE and FLASH (the
// sm80 kernel forced, and whatever the dispatcher picks on this device): every shape class the CPU
// tests cover (T = 1, 17, 63, 64, 65, 1000, 4097; seqlen_q != seqlen_k both ways, so causal rows that
// see no key; GQA and MQA; BTHD, BHTD and padded layouts), both dtypes, head_dim 64 and 128, causal
// and not, default and explicit softmax_scale. Outputs start as NaN with guard bytes around them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device_attention.hpp"

namespace flashbox::test {
namespace {

struct GpuCase {
  AttentionCase c;
  std::string arch;  // flash only: "sm80" forced, "" = dispatcher's choice
  std::string label;
};

std::string impl_label(flashbox_impl impl, const std::string &arch) {
  if (impl == FLASHBOX_NAIVE) return "naive";
  return arch.empty() ? "flash_auto" : "flash_" + arch;
}

std::vector<GpuCase> all_cases() {
  struct Shape {
    int64_t b, tq, tk, hq, hkv;
    Layout layout;
    float scale;
  };
  const std::vector<Shape> shapes = {
      {1, 1, 1, 2, 2, Layout::BTHD, 0.f},     {2, 17, 17, 4, 2, Layout::BHTD, 0.f},
      {2, 63, 63, 3, 3, Layout::PADDED, 0.f}, {1, 64, 64, 4, 1, Layout::BTHD, 0.3f},
      {2, 65, 65, 4, 4, Layout::BHTD, 0.f},   {1, 65, 200, 8, 2, Layout::PADDED, 0.f},
      {1, 200, 65, 2, 1, Layout::BTHD, 0.f},  {2, 1000, 1000, 2, 2, Layout::BTHD, 0.f},
      {1, 130, 1, 2, 2, Layout::BHTD, 0.f},   {1, 1, 300, 4, 2, Layout::PADDED, 0.125f},
  };
  std::vector<GpuCase> out;
  const struct {
    flashbox_impl impl;
    const char *arch;
  } impls[] = {{FLASHBOX_NAIVE, ""}, {FLASHBOX_FLASH, "sm80"}, {FLASHBOX_FLASH, ""}};
  for (auto im : impls)
    for (flashbox_dtype dt : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16})
      for (int64_t d : {64, 128})
        for (int causal : {0, 1})
          for (const Shape &s : shapes) {
            // The dispatcher's choice only needs a sample (the sm90 kernel has its own tests).
            if (im.impl == FLASHBOX_FLASH && std::string(im.arch).empty() && s.tq != 1000 && s.tq != 65) continue;
            GpuCase g;
            g.c.batch = s.b, g.c.seqlen_q = s.tq, g.c.seqlen_k = s.tk, g.c.heads_q = s.hq, g.c.heads_kv = s.hkv;
            g.c.head_dim = d, g.c.dtype = dt, g.c.causal = causal, g.c.layout = s.layout;
            g.c.softmax_scale = s.scale, g.c.device = FLASHBOX_CUDA, g.c.impl = im.impl;
            g.arch = im.arch;
            g.label = impl_label(im.impl, im.arch);
            out.push_back(g);
          }
  // One long sequence per implementation and dtype: many K/V tiles, the causal skip, the pipeline.
  for (auto im : impls) {
    if (im.impl == FLASHBOX_FLASH && std::string(im.arch).empty()) continue;
    for (flashbox_dtype dt : {FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16}) {
      GpuCase g;
      g.c.batch = 1, g.c.seqlen_q = 4097, g.c.seqlen_k = 4097, g.c.heads_q = 2, g.c.heads_kv = 1;
      g.c.head_dim = dt == FLASHBOX_BFLOAT16 ? 64 : 128, g.c.dtype = dt, g.c.causal = dt == FLASHBOX_BFLOAT16;
      g.c.layout = Layout::BHTD, g.c.device = FLASHBOX_CUDA, g.c.impl = im.impl;
      g.arch = im.arch;
      g.label = impl_label(im.impl, im.arch);
      out.push_back(g);
    }
  }
  return out;
}

class GpuForward : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuForward, MatchesFp64Reference) {
  SKIP_WITHOUT_GPU();
  const GpuCase &g = GetParam();
  const flashbox_options opts = family_options(g.arch);
  AttentionData d(g.c);
  SCOPED_TRACE(g.label + " " + d.name());
  DeviceAttention dev(d);
  ASSERT_NO_FATAL_FAILURE(dev.upload());
  ASSERT_EQ(flashbox_attention_forward_opts(&dev.args, &opts), FLASHBOX_OK) << flashbox_last_error();
  ASSERT_NO_FATAL_FAILURE(dev.download());
  EXPECT_TRUE(dev.guards_intact) << "bytes before or after O/LSE were written";
  EXPECT_TRUE(d.o_padding_untouched()) << "padding between rows/heads of O was written";
  const Comparison r = d.compare();
  EXPECT_FALSE(r.has_nan) << "NaN/inf in O or NaN in LSE (poison left unwritten?)";
  EXPECT_LT(r.rel_error, d.tolerance()) << "max_abs_error " << r.max_abs_error;
  EXPECT_LT(r.lse_max_abs_error, 1e-2) << "LSE differs from the reference (or disagrees on -inf)";
  const std::string kernel = flashbox_last_kernel();
  const int64_t scratch = flashbox_last_scratch_peak_bytes();
  if (g.c.impl == FLASHBOX_FLASH) {
    EXPECT_EQ(scratch, 0) << "flash must take no scratch memory";
    if (g.arch == "sm80") EXPECT_EQ(kernel.rfind("cuda_flash_sm80_d" + std::to_string(g.c.head_dim), 0), 0u) << kernel;
  } else {
    const int64_t scores = g.c.batch * g.c.heads_q * g.c.seqlen_q * g.c.seqlen_k;
    EXPECT_EQ(scratch, scores * (4 + 2)) << "naive keeps S (fp32) and P (16-bit), both measured";
    EXPECT_EQ(kernel.rfind("cuda_naive", 0), 0u) << kernel;
  }
}

std::string case_name(const ::testing::TestParamInfo<GpuCase> &info) {
  const AttentionCase &c = info.param.c;
  std::string n = info.param.label + "_" + cpu::dtype_name(c.dtype) + "_d" + std::to_string(c.head_dim) + "_b" +
                  std::to_string(c.batch) + "_sq" + std::to_string(c.seqlen_q) + "_sk" + std::to_string(c.seqlen_k) +
                  "_hq" + std::to_string(c.heads_q) + "_hkv" + std::to_string(c.heads_kv) +
                  (c.causal ? "_causal_" : "_full_") + layout_name(c.layout) + (c.softmax_scale != 0 ? "_scaled" : "") +
                  "_" + std::to_string(info.index);
  return n;
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuForward, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace flashbox::test
