// Report step "peers": PyTorch's SDPA backends on the bench step's shapes, timed by the same method,
// so the page and the criteria compare flashbox with SDPA from one `flashbox report`. The timing is
// src/report/sdpa_peers.py (embedded at build time), run by the first Python that imports torch:
// `flashbox report --python PATH`, else $FLASHBOX_PYTHON, else python3 and python on PATH. With a GPU:
// FlashAttention-2, cuDNN and memory-efficient, forward and backward; without one: the CPU math and
// flash backends beside the CPU levels. Without such a Python the step says which ones it tried.
#include "report/child_process.hpp"
#include "report/html_assets.hpp"
#include "report/report.hpp"
#include "report/step_registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

namespace flashbox::report {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kNoTorch = 3;  // sdpa_peers.py's exit status when torch cannot be used

// The Pythons to try, with where each came from (for the reason when none has torch).
std::vector<std::pair<std::string, std::string>> python_candidates(const ReportContext &ctx) {
  if (!ctx.python.empty()) return {{ctx.python, "--python"}};
  if (const char *env = std::getenv("FLASHBOX_PYTHON"); env && *env) return {{env, "FLASHBOX_PYTHON"}};
  return {{"python3", "PATH"}, {"python", "PATH"}};
}

// Sorted, distinct seqlens of the bench rows of one device and direction (the forward sweep goes one
// size further than the backward's).
std::vector<int64_t> bench_seqlens(const json &bench, const std::string &device, const std::string &direction) {
  std::set<int64_t> t;
  for (const json &r : bench["rows"])
    if (r.value("device", "") == device && r.value("direction", "forward") == direction)
      t.insert(r.value("seqlen", int64_t{0}));
  return {t.begin(), t.end()};
}

std::string joined(const std::vector<int64_t> &v) { return fmt::format("{}", fmt::join(v, ",")); }

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "flashbox-peers-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("cannot make a temporary folder for the peers script");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const fs::path &path() const { return path_; }

 private:
  fs::path path_;
};

json run_peers(ReportContext &ctx) {
  const json *doc = ctx.document;
  if (!doc || !(*doc)["steps"].contains("bench") || !(*doc)["steps"]["bench"].value("measured", false))
    return not_measured_step(
        "SDPA is timed on the bench step's shapes, and the bench step did not run "
        "(flashbox report --steps bench,peers)");
  const json &bench = (*doc)["steps"]["bench"];
  const bool gpu = bench.value("device", "") == "cuda";
  // The GPU configuration is steps.bench.config; the CPU rows' is config on a CPU-only machine.
  const json &config = bench["config"];
  const std::string device = gpu ? "cuda" : "cpu";
  const auto forward = bench_seqlens(bench, device, "forward"), backward = bench_seqlens(bench, device, "backward");
  if (forward.empty() && backward.empty()) return not_measured_step("the bench step has no rows to compare with");

  TempDir dir;
  const fs::path script = dir.path() / "sdpa_peers.py";
  {
    std::ofstream out(script, std::ios::binary);
    out.write(reinterpret_cast<const char *>(assets::peers_script), std::streamsize(assets::peers_script_size));
    if (!out) throw std::runtime_error("cannot write the peers script to " + script.string());
  }

  std::vector<std::string> tried;
  for (const auto &[python, from] : python_candidates(ctx)) {
    const std::string found = find_executable(python);
    if (found.empty()) {
      tried.push_back(fmt::format("{} ({}): not found", python, from));
      continue;
    }
    const fs::path out = dir.path() / "peers.json";
    const std::vector<std::string> argv = {found,
                                           "-u",
                                           script.string(),
                                           "--device",
                                           device,
                                           "--impls",
                                           gpu ? "sdpa_flash,sdpa_cudnn,sdpa_efficient" : "sdpa_math,sdpa_flash",
                                           "--forward-seqlens",
                                           joined(forward),
                                           "--backward-seqlens",
                                           joined(backward),
                                           "--batch",
                                           std::to_string(config.value("batch", 4)),
                                           "--heads",
                                           std::to_string(config.value("heads", 12)),
                                           "--head-dim",
                                           std::to_string(config.value("head_dim", 64)),
                                           "--dtype",
                                           config.value("dtype", std::string("bf16")),
                                           "--causal",
                                           config.value("causal", true) ? "1" : "0",
                                           "--repeats",
                                           std::to_string(config.value("repeats", 10)),
                                           "--warmup",
                                           std::to_string(config.value("warmup", 3)),
                                           "--seed",
                                           std::to_string(ctx.seed),
                                           "--json",
                                           out.string()};
    const auto result = run_child(argv, ctx.quick ? 300 : 900, [&](const std::string &line) {
      int done = 0, total = 0, used = 0;
      if (std::sscanf(line.c_str(), "progress %d %d %n", &done, &total, &used) == 2 && used > 0)
        ctx.progress(fmt::format("SDPA {}", line.substr(size_t(used))), done, total);
    });
    if (result.started && result.exit_code == kNoTorch) {
      std::string why = result.output;
      while (!why.empty() && why.back() == '\n') why.pop_back();
      tried.push_back(fmt::format("{} ({}): {}", python, from, why.substr(why.rfind('\n') + 1)));
      continue;
    }
    if (!result.started || result.timed_out || result.exit_code != 0)
      return not_measured_step(
          fmt::format("{} failed{}: {}", found,
                      result.timed_out ? " (time limit)" : fmt::format(" (exit {})", result.exit_code), result.output));
    return read_json_file(out.string());
  }
  return not_measured_step(
      fmt::format("no Python with PyTorch found ({}); give one with `flashbox report "
                  "--python PATH` or FLASHBOX_PYTHON",
                  fmt::join(tried, "; ")));
}

FLASHBOX_REPORT_STEP(55, "peers", run_peers);

}  // namespace
}  // namespace flashbox::report
