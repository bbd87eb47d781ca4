// `flashbox bench`: the SPEC experiment's timings over T for each implementation (GPU by default,
// `--device cpu` for the CPU levels), a table on the terminal or JSON.
#include "command_registry.hpp"
#include "progress.hpp"
#include "report/bench.hpp"
#include "report/dtype_names.hpp"
#include "text_table.hpp"

#include "core/dtype.hpp"

#include <fmt/core.h>

#include <memory>
#include <stdexcept>

namespace flashbox::cli {
namespace cmd_bench {

struct BenchOptions {
  std::string device = "auto";
  int64_t batch = 4, heads = 12, heads_kv = 0, head_dim = 64;
  std::string dtype = "bf16";
  std::vector<int64_t> seqlens;
  std::vector<std::string> impls;
  int repeats = 10, warmup = -1;
  bool causal = true, backward = false, json = false;
  uint64_t seed = 1234;
};

std::string opt_cell(const std::optional<double> &v, const char *format) {
  return v ? fmt::format(fmt::runtime(format), *v) : "-";
}

void print_table(const report::BenchResult &r) {
  const auto &c = r.config;
  fmt::print(
      "{} attention on {}: batch {}, heads {}/{} (q/kv), head_dim {}, {}, {}; median of {} runs after {} "
      "warm-up\n\n",
      c.backward ? "Backward" : "Forward", c.device == FLASHBOX_CPU ? "the CPU" : "CUDA", c.batch, c.heads,
      c.heads_kv ? c.heads_kv : c.heads, c.head_dim, cpu::dtype_name(c.dtype), c.causal ? "causal" : "not causal",
      c.repeats, c.warmup);
  TextTable table({"T", "impl", "kernel", "ms", "TFLOP/s", "extra memory", "input sets", "status"});
  for (const auto &row : r.rows)
    table.add_row({std::to_string(row.seqlen), row.impl, row.kernel.empty() ? "-" : row.kernel,
                   opt_cell(row.ms, "{:.3f}"), opt_cell(row.tflops, "{:.2f}"),
                   row.extra_bytes ? format_bytes(*row.extra_bytes) : "-", std::to_string(row.input_sets),
                   row.status == "ok" ? "ok" : (row.status == "oom" ? "OUT OF MEMORY" : "error")});
  fmt::print("{}", table.render());
  for (const auto &row : r.rows)
    if (!row.error.empty()) fmt::print("  T={} {}: {}\n", row.seqlen, row.impl, row.error);
  fmt::print(
      "\nextra memory: scratch the library allocated beyond inputs and outputs (measured by its "
      "allocator, peak)\nFLOPs: {} * B * H * T^2 * D{}\n",
      c.causal ? 2 : 4, c.backward ? " * 2.5 (backward)" : "");
}

void run(const BenchOptions &o) {
  report::BenchConfig config;
  if (o.device == "auto") {
    config.device = flashbox_cuda_device_count() > 0 ? FLASHBOX_CUDA : FLASHBOX_CPU;
    if (config.device == FLASHBOX_CPU) fmt::print(stderr, "flashbox bench: no CUDA device, timing the CPU levels\n");
  } else {
    config.device = o.device == "cpu" ? FLASHBOX_CPU : FLASHBOX_CUDA;
    if (config.device == FLASHBOX_CUDA && flashbox_cuda_device_count() <= 0)
      throw std::runtime_error("--device cuda: no CUDA device (or flashbox built without CUDA); try --device cpu");
  }
  config.batch = o.batch;
  config.heads = o.heads;
  config.heads_kv = o.heads_kv;
  config.head_dim = o.head_dim;
  config.dtype = report::parse_dtype(o.dtype);
  config.causal = o.causal;
  config.backward = o.backward;
  config.seqlens = o.seqlens;
  for (const auto &name : o.impls) config.impls.push_back(report::parse_impl(name));
  config.repeats = o.repeats;
  config.warmup = o.warmup >= 0 ? o.warmup : (config.device == FLASHBOX_CPU ? 1 : 3);
  config.seed = o.seed;

  report::BenchResult result;
  {
    ProgressLine progress;
    result = report::run_bench(config, [&](const std::string &what, int done, int total) {
      progress.update(what, done, total);
    });
  }
  if (o.json)
    fmt::print("{}\n", report::to_json(result).dump(2));
  else
    print_table(result);
}

void setup(CLI::App &app) {
  auto o = std::make_shared<BenchOptions>();
  auto *cmd = app.add_subcommand("bench", "SPEC step 5: time each implementation over T (TFLOP/s, extra memory, OOM)");
  cmd->add_option("--device", o->device, "cuda, cpu, or auto (cuda when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--seqlens", o->seqlens, "comma-separated T list (default GPU 512..16384, CPU 256..2048)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--impls", o->impls,
                  "comma-separated: naive, blocked, flash, auto (default GPU naive,flash; "
                  "CPU naive,blocked)")
      ->delimiter(',')
      ->check(CLI::IsMember({"naive", "blocked", "flash", "auto"}));
  cmd->add_option("--batch", o->batch, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--heads", o->heads, "query heads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--heads-kv", o->heads_kv, "key/value heads (GQA; default: --heads)")->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", o->head_dim, "head dimension")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "input dtype")
      ->check(CLI::IsMember(report::dtype_names()))
      ->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "timed runs (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "untimed runs first (default GPU 3, CPU 1)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--causal,!--no-causal", o->causal, "causal mask (default on)");
  cmd->add_flag("--backward", o->backward, "time the backward pass (FLOPs 2.5x the forward's)");
  cmd->add_option("--seed", o->seed, "seed of the random inputs")->capture_default_str();
  cmd->add_flag("--json", o->json, "print JSON (steps.bench of docs/report-schema.md) instead of a table");
  cmd->callback([o] { run(*o); });
}

FLASHBOX_COMMAND(50, setup);

}  // namespace cmd_bench
}  // namespace flashbox::cli
