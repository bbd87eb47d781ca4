// `flashbox check`: SPEC step 4's correctness table. Every implementation this machine runs, on the
// same seeded random inputs, against the fp64 reference; exit status 1 when one of them fails.
#include "command_registry.hpp"
#include "progress.hpp"
#include "report/correctness.hpp"
#include "report/dtype_names.hpp"
#include "text_table.hpp"

#include "core/dtype.hpp"

#include <fmt/core.h>

#include <memory>

namespace flashbox::cli {
namespace cmd_check {

struct CheckOptions {
  int64_t batch = 2, heads = 12, heads_kv = 0, seqlen_q = 1000, seqlen_k = 0, head_dim = 64;
  std::string dtype = "bf16";
  bool causal = true;
  uint64_t seed = 1234;
  bool json = false;
};

std::string error_cell(const report::CheckRow &r, double value) { return r.status == "ok" ? format_sci(value) : "-"; }

void print_table(const report::CheckResult &r) {
  const auto &s = r.config.shape;
  fmt::print(
      "Correctness against the fp64 reference: batch {}, heads {}/{} (q/kv), T {}x{}, head_dim {}, "
      "{}, {}, seed {}\n\n",
      s.batch, s.heads_q, s.heads_kv, s.seqlen_q, s.seqlen_k, s.head_dim, cpu::dtype_name(s.dtype),
      s.causal ? "causal" : "not causal", r.config.seed);
  TextTable table({"device", "implementation", "kernel", "max abs error", "rel error", "ms", "result"});
  for (const auto &row : r.rows)
    table.add_row({row.device, row.label, row.kernel.empty() ? "-" : row.kernel, error_cell(row, row.max_abs_error),
                   error_cell(row, row.rel_error), fmt::format("{:.1f}", row.ms),
                   row.passed ? "pass" : (row.status == "ok" ? "FAIL" : "ERROR")});
  fmt::print("{}", table.render());
  for (const auto &row : r.rows)
    if (row.status != "ok") fmt::print("  {} {}: {}\n", row.device, row.label, row.error);
  fmt::print("\npass: rel error ||out - ref|| / ||ref|| < {:.0e}\n", r.threshold);
  if (r.blocked_vs_naive_max_abs)
    fmt::print("CPU blocked vs CPU naive: max abs difference {}, rel {}\n", format_sci(*r.blocked_vs_naive_max_abs),
               format_sci(*r.blocked_vs_naive_rel));
  for (const auto &why : r.not_checked) fmt::print("not checked: {}\n", why);
  if (r.rows.size() <= 2 && r.not_checked.empty()) fmt::print("(no CUDA device: GPU implementations not checked)\n");
}

void run(const CheckOptions &o) {
  report::CheckConfig config;
  config.shape = {o.batch,
                  o.seqlen_q,
                  o.seqlen_k ? o.seqlen_k : o.seqlen_q,
                  o.heads,
                  o.heads_kv ? o.heads_kv : o.heads,
                  o.head_dim,
                  report::parse_dtype(o.dtype),
                  o.causal};
  config.seed = o.seed;
  report::CheckResult result;
  {
    ProgressLine progress;
    result = report::run_check(config, [&](const std::string &what, int done, int total) {
      progress.update(what, done, total);
    });
  }
  if (o.json)
    fmt::print("{}\n", report::to_json(result).dump(2));
  else
    print_table(result);
  if (!result.all_passed()) throw CLI::RuntimeError(1);  // exit status 1, the table says why
}

void setup(CLI::App &app) {
  auto o = std::make_shared<CheckOptions>();
  auto *cmd = app.add_subcommand("check", "SPEC step 4: every implementation against the fp64 reference");
  cmd->add_option("--batch", o->batch, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--heads", o->heads, "query heads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--heads-kv", o->heads_kv, "key/value heads (GQA; default: --heads)")->check(CLI::PositiveNumber);
  cmd->add_option("--seqlen-q", o->seqlen_q, "query length")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--seqlen-k", o->seqlen_k, "key length (default: --seqlen-q)")->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", o->head_dim, "head dimension")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "input dtype")
      ->check(CLI::IsMember(report::dtype_names()))
      ->capture_default_str();
  cmd->add_flag("--causal,!--no-causal", o->causal, "causal mask, bottom-right aligned (default on)");
  cmd->add_option("--seed", o->seed, "seed of the random inputs")->capture_default_str();
  cmd->add_flag("--json", o->json, "print JSON (steps.check of docs/report-schema.md) instead of a table");
  cmd->callback([o] { run(*o); });
}

FLASHBOX_COMMAND(40, setup);

}  // namespace cmd_check
}  // namespace flashbox::cli
