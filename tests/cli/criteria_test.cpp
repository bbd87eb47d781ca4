// The report's criteria and merge rules on hand-made documents (no binary involved).
#include "report/criteria.hpp"
#include "report/bench.hpp"
#include "report/report.hpp"

#include <gtest/gtest.h>

namespace flashbox::test {
namespace {

using nlohmann::json;

json find(const json &criteria, const std::string &name) {
  for (const auto &c : criteria)
    if (c["name"] == name) return c;
  return nullptr;
}

json bench_doc(const json &rows) { return {{"steps", {{"bench", {{"measured", true}, {"rows", rows}}}}}}; }

json flash_row(int64_t t, int64_t extra) {
  return {{"device", "cuda"},     {"impl", "flash"}, {"direction", "forward"}, {"seqlen", t}, {"status", "ok"},
          {"extra_bytes", extra}, {"ms", 1.0}};
}

TEST(ReportCriteria, FlashMemoryLinearInT) {
  const std::string name = "Flash extra memory linear in T";
  // LSE-sized scratch (linear) passes; a T^2 one fails.
  auto linear = report::evaluate_criteria(
      bench_doc({flash_row(1024, 2 << 20), flash_row(2048, 4 << 20), flash_row(4096, 8 << 20)}));
  EXPECT_EQ(find(linear, name)["status"], "pass") << find(linear, name).dump();
  auto quadratic = report::evaluate_criteria(bench_doc({flash_row(1024, 8 << 20), flash_row(2048, 32 << 20)}));
  EXPECT_EQ(find(quadratic, name)["status"], "fail");
  auto none = report::evaluate_criteria(json::object());
  EXPECT_EQ(find(none, name)["status"], "not_measured");
}

TEST(ReportCriteria, NaiveOomMustBeClean) {
  const std::string name = "Naive GPU attention reports OOM cleanly where S and P do not fit";
  json ok = {{"device", "cuda"}, {"impl", "naive"}, {"seqlen", 8192}, {"status", "ok"}};
  json oom = {{"device", "cuda"}, {"impl", "naive"}, {"seqlen", 16384}, {"status", "oom"}};
  json crash = {{"device", "cuda"}, {"impl", "naive"}, {"seqlen", 16384}, {"status", "error"}};
  const auto clean = find(report::evaluate_criteria(bench_doc({ok, oom})), name);
  EXPECT_EQ(clean["status"], "pass");
  EXPECT_NE(clean["value"].get<std::string>().find("16384"), std::string::npos) << clean.dump();
  EXPECT_EQ(find(report::evaluate_criteria(bench_doc({ok, crash})), name)["status"], "fail");
}

TEST(ReportCriteria, CpuScratchIsJudgedAtTheLargestT) {
  const std::string name = "CPU blocked uses less scratch memory than CPU naive";
  auto row = [](const char *impl, int64_t t, int64_t bytes) {
    return json{{"device", "cpu"}, {"impl", impl}, {"direction", "forward"}, {"seqlen", t}, {"extra_bytes", bytes}};
  };
  // Per-thread tiles may outweigh a small S and P; what counts is the T^2 growth at the largest T.
  const auto pass = report::evaluate_criteria(bench_doc(
      {row("naive", 64, 100), row("blocked", 64, 500), row("naive", 1024, 20000), row("blocked", 1024, 600)}));
  EXPECT_EQ(find(pass, name)["status"], "pass") << find(pass, name).dump();
  const auto fail = report::evaluate_criteria(bench_doc({row("naive", 1024, 20000), row("blocked", 1024, 30000)}));
  EXPECT_EQ(find(fail, name)["status"], "fail");
}

TEST(ReportCriteria, CheckRowsBecomeOneCriterionEach) {
  json doc = {
      {"steps",
       {{"check",
         {{"measured", true},
          {"threshold", 1e-2},
          {"blocked_vs_naive", {{"max_abs", 1e-3}, {"rel", 1e-4}}},
          {"rows",
           {{{"device", "cpu"}, {"impl", "naive"}, {"status", "ok"}, {"rel_error", 2e-3}, {"max_abs_error", 8e-3}},
            {{"device", "cpu"}, {"impl", "blocked"}, {"status", "ok"}, {"rel_error", 0.5}, {"max_abs_error", 1.0}},
            {{"device", "cuda"},
             {"impl", "flash"},
             {"label", "flash (sm90)"},
             {"status", "error"},
             {"error", "boom"},
             {"rel_error", nullptr},
             {"max_abs_error", nullptr}}}}}}}}};
  const auto c = report::evaluate_criteria(doc);
  EXPECT_EQ(find(c, "CPU naive matches the fp64 reference")["status"], "pass");
  EXPECT_EQ(find(c, "CPU blocked matches the fp64 reference")["status"], "fail");
  EXPECT_EQ(find(c, "CUDA flash (sm90) matches the fp64 reference")["status"], "fail");
  EXPECT_EQ(find(c, "CUDA naive matches the fp64 reference")["status"], "not_measured");
  EXPECT_EQ(find(c, "CPU blocked agrees with CPU naive")["status"], "pass");
}

TEST(ReportMerge, MeasuredStepsReplaceAndUnmeasuredOnlyFillGaps) {
  json doc = {{"steps", {{"check", {{"measured", true}, {"rows", json::array()}}}}}, {"merged", json::array()}};
  report::merge_document(doc,
                         {{"steps",
                           {{"check", {{"measured", false}, {"reason", "x"}}},
                            {"gpt2", {{"measured", false}, {"reason", "y"}}}}}},
                         "a.json");
  EXPECT_TRUE(doc["steps"]["check"]["measured"].get<bool>());  // kept
  EXPECT_EQ(doc["steps"]["gpt2"]["reason"], "y");              // gap filled
  report::merge_document(doc, {{"steps", {{"check", {{"measured", true}, {"rows", {1}}}}}}}, "b.json");
  EXPECT_EQ(doc["steps"]["check"]["rows"].size(), 1u);  // replaced by the measured one
  EXPECT_EQ(doc["merged"].size(), 2u);
  EXPECT_THROW(report::merge_document(doc, {{"schema_version", 99}, {"steps", json::object()}}, "c.json"),
               std::runtime_error);
  EXPECT_THROW(report::merge_document(doc, {{"something", 1}}, "d.json"), std::runtime_error);
}

TEST(ReportMerge, PeersRowsOfSeveralRunsAreKeptTogether) {
  json doc = {{"steps", json::object()}, {"merged", json::array()}};
  const json forward = {{"rows", {{{"impl", "flashbox"}, {"direction", "forward"}}}}};
  const json backward = {{"rows", {{{"impl", "flashbox"}, {"direction", "backward"}}, {{"impl", "sdpa_flash"}}}}};
  report::merge_document(doc, forward, "fwd.json");
  report::merge_document(doc, backward, "bwd.json");
  ASSERT_EQ(doc["steps"]["peers"]["rows"].size(), 3u);
  EXPECT_EQ(doc["steps"]["peers"]["rows"][0]["direction"], "forward");
  EXPECT_EQ(doc["steps"]["peers"]["rows"][1]["direction"], "backward");
}

// The report's own peers step times SDPA by the bench step's method and has no flashbox rows: flashbox's
// side of the comparison is the bench step's row of the same shape. CPU peers never count.
TEST(ReportCriteria, PeersOfTheSameMethodCompareWithTheBenchRows) {
  auto bench_row = [](int64_t t, const char *direction, double ms) {
    return json{{"impl", "flash"},        {"device", "cuda"}, {"seqlen", t},
                {"direction", direction}, {"ms", ms},         {"status", "ok"}};
  };
  auto sdpa_row = [](const char *impl, int64_t t, const char *direction, double ms, const char *device = "cuda") {
    return json{{"impl", impl},   {"device", device}, {"batch", 4},  {"heads", 12},
                {"head_dim", 64}, {"causal", true},   {"seqlen", t}, {"direction", direction},
                {"ms", ms},       {"status", "ok"}};
  };
  json doc = {
      {"steps",
       {{"bench",
         {{"measured", true},
          {"device", "cuda"},
          {"config", {{"batch", 4}, {"heads", 12}, {"head_dim", 64}, {"causal", true}}},
          {"rows",
           {bench_row(1024, "forward", 0.1), bench_row(4096, "forward", 1.0), bench_row(4096, "backward", 3.0),
            bench_row(512, "forward", 9.0)}}}},
        {"peers",
         {{"measured", true},
          {"same_method_as_bench", true},
          {"rows",
           {sdpa_row("sdpa_flash", 1024, "forward", 0.2), sdpa_row("sdpa_flash", 4096, "forward", 1.5),
            sdpa_row("sdpa_cudnn", 4096, "forward", 0.5), sdpa_row("sdpa_flash", 512, "forward", 1.0),
            sdpa_row("sdpa_flash", 4096, "backward", 2.0), sdpa_row("sdpa_flash", 1024, "forward", 0.01, "cpu")}}}}}}};
  auto c = report::evaluate_criteria(doc);
  const json fwd = find(c, "flashbox at least as fast as SDPA FlashAttention-2 (forward, T 1024..16384)");
  EXPECT_EQ(fwd["status"], "pass") << fwd.dump();  // T 512 is outside the range; cuDNN is not the bar
  EXPECT_NE(fwd["value"].get<std::string>().find("2 shapes"), std::string::npos) << fwd.dump();
  EXPECT_NE(fwd["value"].get<std::string>().find("the bench step's rows"), std::string::npos) << fwd.dump();
  const json bwd = find(c, "flashbox at least as fast as SDPA FlashAttention-2 (backward, T 1024..16384)");
  EXPECT_EQ(bwd["status"], "fail") << bwd.dump();  // 3.0 ms against 2.0
  // Peers timed another way (no same_method_as_bench) are not compared with the bench rows.
  doc["steps"]["peers"].erase("same_method_as_bench");
  c = report::evaluate_criteria(doc);
  EXPECT_EQ(find(c, "flashbox at least as fast as SDPA FlashAttention-2 (forward, T 1024..16384)")["status"],
            "not_measured");
}

TEST(ReportBench, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(report::median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(report::median({4, 1, 3, 2}), 2.5);
  EXPECT_THROW(report::median({}), std::invalid_argument);
}

}  // namespace
}  // namespace flashbox::test
