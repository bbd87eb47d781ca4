// The report's FP8 comparison (src/report/fp8_compare.hpp): its shapes and FLOPs, when the step says
// why it cannot run, the quantisation of its inputs, the windowed fp64 reference its errors use, and
// the rows it writes (steps.fp8 of docs/report-schema.md). The GPU measurement itself runs only on a
// Hopper GPU (`flashbox report`); here a machine without one gets the not-measured step.
#include "core/dtype.hpp"
#include "core/float8.hpp"
#include "cpu/reference_fp64.hpp"
#include "report/fp8_compare.hpp"
#include "report/random_fill.hpp"
#include "support/cli_runner.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace flashbox::test {
namespace {

using namespace flashbox::report;
using nlohmann::json;

TEST(Fp8Report, ShapesFollowFlashAttention3sSetupAndCountTheSpecsFlops) {
  const Fp8Config c;
  const AttentionShape s = fp8_shape(c, 128, 2048, false, FLASHBOX_FLOAT8_E4M3);
  EXPECT_EQ(s.batch, 8);
  EXPECT_EQ(s.heads_q, 16);
  EXPECT_EQ(s.heads_kv, 16);
  EXPECT_EQ(s.q_bytes(), 16384 * 2048);                 // one byte an element
  EXPECT_DOUBLE_EQ(s.forward_flops(), 274877906944.0);  // 4 B H T^2 D, as bench/results/h100/fp8.json's work
  EXPECT_DOUBLE_EQ(fp8_shape(c, 256, 16384, true, FLASHBOX_BFLOAT16).forward_flops(), 4.0 * 16384 * 2048 * 16384 / 2);
  EXPECT_THROW(fp8_shape(c, 128, 3000, false, FLASHBOX_BFLOAT16), std::invalid_argument);
  EXPECT_THROW(fp8_shape(c, 96 * 7, 2048, false, FLASHBOX_BFLOAT16), std::invalid_argument);
  // Every configured shape is valid, quick or not.
  for (bool quick : {false, true}) {
    const Fp8Config q = fp8_config(quick, 7);
    EXPECT_EQ(q.seed, 7u);
    for (int64_t d : q.head_dims)
      for (int64_t t : q.seqlens) EXPECT_NO_THROW(fp8_shape(q, d, t, true, FLASHBOX_FLOAT8_E4M3));
  }
}

TEST(Fp8Report, SaysInOneLineWhyItCannotRun) {
  const auto none = fp8_unavailable_reason(std::nullopt, true);
  ASSERT_TRUE(none);
  EXPECT_NE(none->find("no CUDA GPU"), std::string::npos) << *none;
  EXPECT_NE(none->find("sm_90a"), std::string::npos) << *none;
  GpuInfo a100{"NVIDIA A100-SXM4-80GB", 8, 0, 108, 0, 0};
  const auto ampere = fp8_unavailable_reason(a100, true);
  ASSERT_TRUE(ampere);
  EXPECT_NE(ampere->find("NVIDIA A100-SXM4-80GB is sm_80, not Hopper"), std::string::npos) << *ampere;
  GpuInfo h100{"NVIDIA H100 80GB HBM3", 9, 0, 132, 0, 0};
  const auto unbuilt = fp8_unavailable_reason(h100, false);
  ASSERT_TRUE(unbuilt);
  EXPECT_NE(unbuilt->find("built without sm_90a"), std::string::npos) << *unbuilt;
  EXPECT_FALSE(fp8_unavailable_reason(h100, true));
  for (const auto &why : {*none, *ampere, *unbuilt}) EXPECT_EQ(why.find('\n'), std::string::npos);
}

TEST(Fp8Report, Bf16InputsAreTheExactDequantizedE4m3Values) {
  const std::vector<float> x = {0.0f, 1.0f, -1.3f, 0.01f, 2.7182818f, 14.0f, 1000.0f, -1e-5f};
  std::vector<unsigned char> codes(x.size());
  std::vector<uint16_t> bf16(x.size());
  const float descale = 0.03125f;
  quantize_e4m3(x.data(), int64_t(x.size()), descale, codes.data(), bf16.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(codes[i], core::float_to_e4m3(x[i] / descale)) << i;
    const float dequantized = core::e4m3_to_float(codes[i]) * descale;
    EXPECT_EQ(cpu::bf16_to_float(bf16[i]), dequantized) << i;  // exact, not rounded
  }
  EXPECT_EQ(cpu::bf16_to_float(bf16[6]), 448.0f * descale);    // saturated, as the GPU's satfinite
  EXPECT_NEAR(cpu::bf16_to_float(bf16[2]), -1.3f, 1.3f / 16);  // 3 mantissa bits
}

// The windows' reference equals the full fp64 reference at those rows, causal and not, so the error
// the report states is the error of those rows against the real reference.
TEST(Fp8Report, WindowedReferenceIsTheFullReferenceAtThoseRows) {
  for (bool causal : {false, true}) {
    const AttentionShape s{2, 96, 96, 3, 3, 16, FLASHBOX_BFLOAT16, causal};
    std::vector<uint16_t> q(size_t(s.q_elements())), k(size_t(s.kv_elements())), v(size_t(s.kv_elements()));
    fill_random_normal(q.data(), FLASHBOX_BFLOAT16, s.q_elements(), 5, 0);
    fill_random_normal(k.data(), FLASHBOX_BFLOAT16, s.kv_elements(), 5, 1);
    fill_random_normal(v.data(), FLASHBOX_BFLOAT16, s.kv_elements(), 5, 2);
    const auto windows = error_windows(s, 4, 8);
    ASSERT_EQ(windows.size(), 4u);
    for (const auto &w : windows) {
      EXPECT_GE(w.first_row, 0);
      EXPECT_LE(w.first_row + w.rows, s.seqlen_q);
      EXPECT_LT(w.batch, s.batch);
      EXPECT_LT(w.head, s.heads_q);
    }
    EXPECT_LT(windows.front().first_row, 24);  // early and late rows both sampled
    EXPECT_GT(windows.back().first_row, 64);
    const auto ref = windowed_reference(s, q.data(), k.data(), v.data(), windows);
    ASSERT_EQ(ref.size(), size_t(4 * 8 * 16));

    std::vector<double> full;
    auto a = make_args(s, FLASHBOX_CPU, FLASHBOX_AUTO, q.data(), k.data(), v.data(), nullptr, nullptr);
    cpu::reference_attention_fp64(a, full, nullptr);
    size_t at = 0;
    for (const auto &w : windows)
      for (int64_t r = 0; r < w.rows; ++r)
        for (int64_t c = 0; c < s.head_dim; ++c, ++at)
          ASSERT_NEAR(ref[at],
                      full[size_t(((w.batch * s.seqlen_q + w.first_row + r) * s.heads_q + w.head) * s.head_dim + c)],
                      1e-12)
              << "causal " << causal << " window row " << r;

    // The full reference rounded to bf16 as an "output": its error is bf16's rounding, about 2^-9.
    std::vector<uint16_t> o(full.size());
    for (size_t i = 0; i < full.size(); ++i) o[i] = cpu::float_to_bf16(float(full[i]));
    const ErrorNorms e = windowed_error(s, o.data(), windows, ref);
    EXPECT_GT(e.rel, 0.0);
    EXPECT_LT(e.rel, 4e-3);
    EXPECT_LE(e.max_abs, 1.0 / 128);
    o[size_t(((windows[0].batch * s.seqlen_q + windows[0].first_row) * s.heads_q + windows[0].head) * s.head_dim)] =
        0x7fc0;  // NaN
    EXPECT_TRUE(std::isnan(windowed_error(s, o.data(), windows, ref).max_abs));
  }
}

TEST(Fp8Report, RowsCarryTheShapeFlopsAndTheRatioOfFp8ToBf16) {
  const Fp8Config c = fp8_config(false, 1234);
  Fp8Row ok{128, 2048, true, {}, {}};
  ok.bf16.kernel = "cuda_flash_sm90_d128";
  ok.bf16.ms = 0.5;
  ok.bf16.tflops = 400.0;
  ok.bf16.rel_error = 4e-3;
  ok.fp8.kernel = "cuda_flash_sm90_fp8_d128_128x128";
  ok.fp8.ms = 0.4;
  ok.fp8.tflops = 500.0;
  ok.fp8.rel_error = 2e-2;
  ok.fp8.max_abs_error = NAN;  // not JSON: written as null
  Fp8Row failed{256, 16384, false, {}, {}};
  failed.bf16.tflops = 700.0;
  failed.fp8.status = "error";
  failed.fp8.error = "error 5: the FP8 forward needs sm_90a";
  const json j = fp8_step_json(c, "NVIDIA H100 80GB HBM3", {ok, failed});
  EXPECT_TRUE(j["measured"].get<bool>());
  EXPECT_EQ(j["device"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(j["config"]["dtype"], "e4m3");
  EXPECT_EQ(j["config"]["out_dtype"], "bf16");
  EXPECT_EQ(j["config"]["error_rows"], 256);
  EXPECT_EQ(j["config"]["descale_value"], 0.03125);
  ASSERT_EQ(j["rows"].size(), 2u);
  const json &r0 = j["rows"][0];
  EXPECT_EQ(r0["batch"], 8);
  EXPECT_EQ(r0["heads"], 16);
  EXPECT_EQ(r0["causal"], true);
  EXPECT_DOUBLE_EQ(r0["flops"].get<double>(), 274877906944.0 / 2);
  EXPECT_DOUBLE_EQ(r0["ratio"].get<double>(), 1.25);
  EXPECT_EQ(r0["fp8"]["kernel"], "cuda_flash_sm90_fp8_d128_128x128");
  EXPECT_EQ(r0["fp8"]["rel_error"], 2e-2);
  EXPECT_TRUE(r0["fp8"]["max_abs_error"].is_null());
  EXPECT_FALSE(r0["fp8"].contains("error"));
  const json &r1 = j["rows"][1];
  EXPECT_EQ(r1["batch"], 1);
  EXPECT_EQ(r1["heads"], 8);
  EXPECT_TRUE(r1["ratio"].is_null());  // no ratio unless both ran
  EXPECT_EQ(r1["fp8"]["status"], "error");
  EXPECT_EQ(r1["fp8"]["error"], "error 5: the FP8 forward needs sm_90a");
  EXPECT_TRUE(r1["fp8"]["tflops"].is_null());
}

// Where the FP8 forward cannot run, `flashbox report` writes the step unmeasured with its reason.
TEST(Fp8Report, TheReportStepWithoutAHopperGpuIsNotMeasuredWithTheReason) {
  const auto gpu = gpu_info();
  if (gpu && gpu->cc_major == 9) GTEST_SKIP() << "a Hopper GPU is here: the step measures (run flashbox report)";
  const std::string out = temp_path("fp8_report.json");
  const CliResult r = run_cli("report --quick --steps fp8 --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json step = json::parse(read_file(out))["steps"]["fp8"];
  EXPECT_FALSE(step["measured"].get<bool>());
  EXPECT_NE(step["reason"].get<std::string>().find("sm_90a"), std::string::npos) << step.dump();
  // Not selected: present, with that reason.
  const CliResult r2 = run_cli("report --quick --steps memory --json " + out);
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(json::parse(read_file(out))["steps"]["fp8"]["reason"], "not selected (flashbox report --steps)");
}

}  // namespace
}  // namespace flashbox::test
