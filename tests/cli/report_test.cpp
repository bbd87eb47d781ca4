// `flashbox report --quick`: the document of docs/report-schema.md with plausible CPU measurements,
// and --merge of a peers file and of a partial report.
#include "flashbox/flashbox.h"
#include "support/cli_runner.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace flashbox::test {
namespace {

using nlohmann::json;

const json *criterion(const json &doc, const std::string &name) {
  for (const auto &c : doc["criteria"])
    if (c["name"] == name) return &c;
  return nullptr;
}

void expect_header(const json &doc_, const CliResult &result_) {
  EXPECT_EQ(doc_["schema_version"], 1);
  EXPECT_EQ(doc_["generated_at"].get<std::string>().size(), 20u);  // 2026-11-29T12:00:00Z
  const auto &m = doc_["machine"];
  EXPECT_FALSE(m["hostname"].get<std::string>().empty());
  EXPECT_FALSE(m["cpu"].get<std::string>().empty());
  EXPECT_GE(m["cpu_threads"].get<int>(), 1);
  EXPECT_TRUE(m.contains("gpu"));
  EXPECT_EQ(m["build"]["version"], std::string(flashbox_version()));
  EXPECT_TRUE(m["build"]["cuda"].is_boolean());
  // One progress line per step on stderr when it is not a terminal.
  EXPECT_NE(result_.err.find("[1/"), std::string::npos) << result_.err;
}

void expect_cpu_steps(const json &doc_) {
  const auto &s = doc_["steps"];
  for (const char *name : {"memory", "softmax_trace", "blocking", "check", "bench"})
    EXPECT_TRUE(s[name]["measured"].get<bool>()) << name << ": " << s[name].dump();
  for (const char *name : {"peers", "gpt2"}) {
    ASSERT_TRUE(s.contains(name)) << name;
    if (!s[name]["measured"].get<bool>()) EXPECT_FALSE(s[name]["reason"].get<std::string>().empty()) << name;
  }

  EXPECT_EQ(s["memory"]["rows"].size(), 6u);
  for (const auto &step : s["softmax_trace"]["steps"]) EXPECT_GT(step["l"].get<double>(), 0.0);
  EXPECT_LT(s["softmax_trace"]["max_abs_error"].get<double>(), 1e-6);

  EXPECT_EQ(s["blocking"]["grid"], json::array({64, 48}));
  EXPECT_EQ(s["blocking"]["programs"], 3072);
  EXPECT_LT(s["blocking"]["cpu_blocked_vs_naive_max_abs"].get<double>(), 1e-4);  // fp32 comparison

  std::set<std::string> impls;
  for (const auto &row : s["check"]["rows"]) {
    if (row["device"] != "cpu") continue;
    impls.insert(row["impl"].get<std::string>());
    EXPECT_LT(row["rel_error"].get<double>(), 1e-2) << row.dump();
    EXPECT_TRUE(row["passed"].get<bool>());
  }
  EXPECT_EQ(impls, (std::set<std::string>{"naive", "blocked"}));

  int cpu_rows = 0;
  for (const auto &row : s["bench"]["rows"]) {
    if (row["device"] != "cpu") continue;
    ++cpu_rows;
    EXPECT_EQ(row["status"], "ok") << row.dump();
    EXPECT_GT(row["ms"].get<double>(), 0.0);
  }
  EXPECT_GE(cpu_rows, 2);
}

void expect_criteria(const json &doc_) {
  ASSERT_TRUE(doc_["criteria"].is_array());
  ASSERT_GE(doc_["criteria"].size(), 5u);
  for (const auto &c : doc_["criteria"]) {
    EXPECT_FALSE(c["name"].get<std::string>().empty());
    EXPECT_FALSE(c["value"].get<std::string>().empty()) << c.dump();
    EXPECT_TRUE(c["status"] == "pass" || c["status"] == "fail" || c["status"] == "not_measured") << c.dump();
  }
  for (const char *name : {"CPU naive matches the fp64 reference", "CPU blocked matches the fp64 reference",
                           "CPU blocked agrees with CPU naive", "Online softmax equals the exact softmax"}) {
    const json *c = criterion(doc_, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ((*c)["status"], "pass") << c->dump();
  }
  if (doc_["machine"]["gpu"].is_null()) {
    const json *flash = criterion(doc_, "CUDA flash matches the fp64 reference");
    ASSERT_NE(flash, nullptr);
    EXPECT_EQ((*flash)["status"], "not_measured");
  }
}

// One quick report, read by three groups of checks (one test: each report takes seconds on two cores).
TEST(CliReport, QuickReportDocument) {
  const std::string path = temp_path("report.json");
  const CliResult result = run_cli("report --quick --json " + path);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json doc = json::parse(read_file(path));
  expect_header(doc, result);
  expect_cpu_steps(doc);
  expect_criteria(doc);
}

TEST(CliReportMerge, PeersFileAndPartialReportAreFoldedIn) {
  const std::string peers = temp_path("peers.json"), partial = temp_path("partial.json"),
                    out = temp_path("merged.json");
  {
    std::ofstream(peers) << json{{"device", "NVIDIA H200"},
                                 {"torch", "2.9"},
                                 {"rows",
                                  {{{"impl", "flashbox"},
                                    {"seqlen", 4096},
                                    {"batch", 4},
                                    {"heads", 12},
                                    {"head_dim", 64},
                                    {"direction", "forward"},
                                    {"ms", 1.0}},
                                   {{"impl", "sdpa_flash"},
                                    {"seqlen", 4096},
                                    {"batch", 4},
                                    {"heads", 12},
                                    {"head_dim", 64},
                                    {"direction", "forward"},
                                    {"ms", 1.25}}}}};
    std::ofstream(partial) << json{{"schema_version", 1},
                                   {"steps",
                                    {{"gpt2",
                                      {{"measured", true},
                                       {"rows",
                                        {{{"impl", "naive"}, {"loss", 3.28}, {"diff_from_naive", 0.0}},
                                         {{"impl", "blocked"}, {"loss", 3.28005}, {"diff_from_naive", 5e-5}}}}}}}}};
  }
  // Only the memory step runs: the merge does not depend on what was measured here.
  const auto r = run_cli("report --steps memory --json " + out + " --merge " + peers + " " + partial);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_file(out));
  EXPECT_TRUE(doc["steps"]["peers"]["measured"].get<bool>());
  EXPECT_EQ(doc["steps"]["peers"]["rows"].size(), 2u);
  EXPECT_TRUE(doc["steps"]["gpt2"]["measured"].get<bool>());
  EXPECT_EQ(doc["merged"].size(), 2u);
  EXPECT_TRUE(doc["steps"]["memory"]["measured"].get<bool>());
  EXPECT_FALSE(doc["steps"]["check"]["measured"].get<bool>());  // not selected by --steps
  const json *speed = criterion(doc, "flashbox at least as fast as SDPA FlashAttention-2 (forward, T 1024..16384)");
  ASSERT_NE(speed, nullptr);
  EXPECT_EQ((*speed)["status"], "pass") << speed->dump();
  const json *gpt2 = criterion(doc, "GPT-2 losses within 2e-4 of naive");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ((*gpt2)["status"], "pass") << gpt2->dump();
}

TEST(CliReportMerge, StepsNoneAssemblesMergedReportsUnderTheirMachine) {
  const std::string measured = temp_path("measured_elsewhere.json"), out = temp_path("assembled.json");
  const json gpu_machine = {{"hostname", "gpu-host"}, {"gpu", {{"name", "NVIDIA H200"}, {"sms", 132}}}};
  std::ofstream(measured) << json{{"schema_version", 1},
                                  {"machine", gpu_machine},
                                  {"steps", {{"memory", {{"measured", true}, {"rows", json::array()}}}}}};
  const auto r = run_cli("report --steps none --json " + out + " --merge " + measured);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_file(out));
  EXPECT_EQ(doc["machine"], gpu_machine);     // where the steps were measured
  EXPECT_TRUE(doc.contains("assembled_on"));  // and where the file was put together
  EXPECT_NE(doc["assembled_on"]["hostname"], "gpu-host");
  EXPECT_FALSE(doc["steps"]["check"]["measured"].get<bool>());  // nothing measured here
}

// A stand-in for a Python with torch: writes the peers document the real script would and keeps its
// arguments, so the test sees what `flashbox report` asked for.
std::string fake_python(const std::string &name, const std::string &body) {
  const std::string path = temp_path(name);
  std::ofstream(path) << "#!/bin/sh\n" << body;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

TEST(CliReportPeers, TheReportRunsItsPeersScriptWithTheBenchShapes) {
  const std::string python = fake_python("fake_python_ok", R"(out=""; prev=""
for a in "$@"; do [ "$prev" = "--json" ] && out="$a"; prev="$a"; done
[ -s "$2" ] || { echo "no script at $2" >&2; exit 1; }
echo "progress 0 2 forward T=128 sdpa_math"
cat > "$out" <<END
{"measured": true, "same_method_as_bench": true, "torch": "0.0-fake", "device": "cpu", "args": "$*",
 "rows": [{"impl": "sdpa_math", "device": "cpu", "batch": 1, "heads": 4, "head_dim": 64, "seqlen": 128,
           "causal": true, "direction": "forward", "ms": 2.5, "tflops": 0.1, "extra_bytes": null, "status": "ok"}]}
END
)");
  const std::string out = temp_path("peers_report.json");
  const auto r = run_cli("report --quick --steps bench,peers --python " + python + " --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_file(out));
  const json &peers = doc["steps"]["peers"];
  ASSERT_TRUE(peers["measured"].get<bool>()) << peers.dump();
  EXPECT_EQ(peers["rows"].size(), 1u);
  EXPECT_EQ(peers["rows"][0]["impl"], "sdpa_math");
  // The bench step's device, configuration and seqlens: on a CPU-only machine the quick CPU rows
  // (batch 1, 4 heads, T 128 and 256); on a GPU machine steps.bench.config.
  const std::string args = peers["args"];
  const json &bench = doc["steps"]["bench"];
  std::vector<std::string> wanted;
  if (bench["device"] == "cuda") {
    const json &c = bench["config"];
    wanted = {"--device cuda", "--impls sdpa_flash,sdpa_cudnn,sdpa_efficient",
              "--batch " + std::to_string(c["batch"].get<int>()), "--heads " + std::to_string(c["heads"].get<int>()),
              "--head-dim " + std::to_string(c["head_dim"].get<int>()), "--dtype " + c["dtype"].get<std::string>()};
  } else {
    wanted = {"--device cpu", "--impls sdpa_math,sdpa_flash", "--forward-seqlens 128,256 --backward-seqlens ",
              "--batch 1", "--heads 4", "--head-dim 64", "--dtype bf16", "--causal 1", "--warmup 1"};
  }
  for (const auto &want : wanted) EXPECT_NE(args.find(want), std::string::npos) << want << " not in " << args;
}

TEST(CliReportPeers, WithoutTorchThePageIsToldWhy) {
  const std::string python =
      fake_python("fake_python_no_torch", "echo \"cannot import torch: No module named 'torch'\" >&2; exit 3\n");
  const std::string out = temp_path("peers_none.json");
  auto r = run_cli("report --quick --steps bench,peers --python " + python + " --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json peers = json::parse(read_file(out))["steps"]["peers"];
  EXPECT_FALSE(peers["measured"].get<bool>());
  const std::string reason = peers["reason"];
  EXPECT_NE(reason.find("no Python with PyTorch found"), std::string::npos) << reason;
  EXPECT_NE(reason.find("No module named 'torch'"), std::string::npos) << reason;
  EXPECT_NE(reason.find("--python"), std::string::npos) << reason;

  r = run_cli("report --quick --steps bench,peers --python /nonexistent/python3 --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  peers = json::parse(read_file(out))["steps"]["peers"];
  EXPECT_FALSE(peers["measured"].get<bool>());
  EXPECT_NE(peers["reason"].get<std::string>().find("/nonexistent/python3 (--python): not found"), std::string::npos)
      << peers.dump();

  // Without the bench step there are no shapes to time SDPA on: said, not guessed.
  r = run_cli("report --steps peers --python " + python + " --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  peers = json::parse(read_file(out))["steps"]["peers"];
  EXPECT_NE(peers["reason"].get<std::string>().find("bench step"), std::string::npos) << peers.dump();
}

TEST(CliReportPeers, AFailingPeersProgramIsRecordedNotFatal) {
  const std::string python = fake_python("fake_python_crash", "echo 'Traceback: boom' >&2; exit 1\n");
  const std::string out = temp_path("peers_crash.json");
  const auto r = run_cli("report --quick --steps bench,peers --python " + python + " --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json peers = json::parse(read_file(out))["steps"]["peers"];
  EXPECT_FALSE(peers["measured"].get<bool>());
  EXPECT_NE(peers["reason"].get<std::string>().find("boom"), std::string::npos) << peers.dump();
}

}  // namespace
}  // namespace flashbox::test
