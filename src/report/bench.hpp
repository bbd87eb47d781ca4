// The SPEC experiment's timings (`flashbox bench`, the report's "bench" step): each implementation over
// a list of T, forward or backward, median of `repeats` timed runs after `warmup` runs, inputs rotated
// among several buffer sets so caches do not flatter, TFLOP/s, and the scratch memory the library
// itself allocated (flashbox_last_scratch_peak_bytes). An implementation that runs out of memory is
// recorded as "oom" and the sweep goes on.
#pragma once
#include "report/attention_shape.hpp"
#include "report/correctness.hpp"  // Progress

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace flashbox::report {

struct BenchConfig {
  flashbox_device device = FLASHBOX_CUDA;
  int64_t batch = 4, heads = 12, heads_kv = 0, head_dim = 64;  // heads_kv 0: same as heads
  flashbox_dtype dtype = FLASHBOX_BFLOAT16;
  bool causal = true;
  bool backward = false;  // time flashbox_attention_backward instead of the forward
  std::vector<int64_t> seqlens;
  std::vector<flashbox_impl> impls;
  int repeats = 10, warmup = 3;
  uint64_t seed = 1234;
  int64_t rotate_bytes = 0;  // rotate input sets until they exceed this many bytes (0: 2 x L2 on GPU)
};

std::vector<int64_t> default_bench_seqlens(flashbox_device device);      // GPU 512..16384, CPU 256..2048
std::vector<flashbox_impl> default_bench_impls(flashbox_device device);  // GPU naive, flash; CPU naive, blocked
flashbox_impl parse_impl(const std::string &name);                       // "naive", "blocked", "flash", "auto"

struct BenchRow {
  std::string impl, device, kernel, direction;
  int64_t seqlen = 0;
  std::string status = "ok";  // "ok", "oom" or "error"
  std::string error;
  std::optional<double> ms, tflops;
  std::optional<int64_t> extra_bytes;      // flashbox_last_scratch_peak_bytes() of the timed calls
  std::optional<int64_t> free_drop_bytes;  // GPU: device free memory before minus after (cross-check)
  int input_sets = 0;
  int repeats = 0;
};

struct BenchResult {
  BenchConfig config;
  std::vector<BenchRow> rows;
};

BenchResult run_bench(const BenchConfig &config, const Progress &progress = {});
nlohmann::json to_json(const BenchResult &result);  // steps.bench of docs/report-schema.md

double median(std::vector<double> values);

}  // namespace flashbox::report
