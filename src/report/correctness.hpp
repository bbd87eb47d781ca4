// SPEC step 4's correctness table: every implementation this machine can run, on the same seeded
// random inputs, against the fp64 reference (src/cpu/reference_fp64.hpp). Used by `flashbox check` and
// by the report's "check" step.
#pragma once
#include "report/attention_shape.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace flashbox::report {

struct CheckConfig {
  AttentionShape shape{2, 1000, 1000, 12, 12, 64, FLASHBOX_BFLOAT16, true};
  uint64_t seed = 1234;
  bool gpu = true;  // include the CUDA implementations when a GPU is present
};

struct CheckRow {
  std::string device, impl, kernel;  // kernel: flashbox_last_kernel() of the run
  std::string label;                 // what was asked for, e.g. "flash (sm90)"
  std::string status = "ok";         // "ok" or "error" (the API refused or failed: see error)
  std::string error;
  double max_abs_error = 0, rel_error = 0, ms = 0;
  bool passed = false;
};

struct CheckResult {
  CheckConfig config;
  double threshold = 0;  // on rel_error
  std::vector<CheckRow> rows;
  // Implementations present but not run on this input, with the reason (e.g. CUDA for fp32).
  std::vector<std::string> not_checked;
  // CPU blocked against CPU naive, element by element (both must have run).
  std::optional<double> blocked_vs_naive_max_abs, blocked_vs_naive_rel;
  bool all_passed() const;
};

using Progress = std::function<void(const std::string &what, int done, int total)>;

CheckResult run_check(const CheckConfig &config, const Progress &progress = {});

// max |a - b| and ||a - b|| / ||b|| of `out` (dense, in the problem's dtype) against `reference`.
struct ErrorNorms {
  double max_abs = 0, rel = 0;
};
ErrorNorms compare_to_reference(const void *out, flashbox_dtype dtype, const std::vector<double> &reference);

nlohmann::json to_json(const CheckResult &result);  // steps.check of docs/report-schema.md

}  // namespace flashbox::report
