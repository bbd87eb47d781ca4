// `flashbox report`: runs every report step this machine can run and writes the one JSON document
// (docs/report-schema.md); --html also renders the page from it.
#include "command_registry.hpp"
#include "progress.hpp"
#include "report/html_page.hpp"
#include "report/report.hpp"
#include "report/training_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <memory>

namespace flashbox::cli {
namespace cmd_report {

struct ReportCliOptions {
  std::string json_path, html_path;
  bool quick = false;
  std::vector<std::string> merge_files;
  std::vector<std::string> steps;
  unsigned seed = 1234;
  std::string python;
  std::string weights, tokens, training;
};

void run(const ReportCliOptions &o) {
  const bool tty = isatty(fileno(stderr)) != 0;
  ProgressLine progress;
  report::ReportOptions options;
  options.quick = o.quick;
  options.seed = o.seed;
  options.merge_files = o.merge_files;
  options.only_steps = o.steps;
  options.python = o.python;
  options.gpt2_weights = o.weights;
  options.gpt2_tokens = o.tokens;
  options.gpt2_training = o.training;
  // A bad run document is the user's mistake: said now, not after minutes of measuring.
  if (!o.training.empty()) report::check_training_run(report::read_json_file(o.training), o.training);
  options.on_step_start = [&](const std::string &name, int index, int count) {
    progress.finish();
    fmt::print(stderr, "[{}/{}] {} ...{}", index, count, name, tty ? "\n" : "");
    std::fflush(stderr);
  };
  options.on_step_end = [&](const std::string &, double seconds) {
    progress.finish();
    if (tty)
      fmt::print(stderr, "      done in {:.1f} s\n", seconds);
    else
      fmt::print(stderr, " {:.1f} s\n", seconds);  // one line per step in logs
  };
  // Inside a step, progress only on a terminal: logs get one line per step.
  if (tty)
    options.progress = [&](const std::string &what, int done, int total) { progress.update("  " + what, done, total); };

  const auto document = report::run_report(options);
  report::write_json_file(document, o.json_path);
  int passed = 0, failed = 0, unmeasured = 0;
  for (const auto &c : document["criteria"]) {
    const auto status = c.value("status", "");
    (status == "pass" ? passed : status == "fail" ? failed : unmeasured)++;
  }
  fmt::print(stderr, "wrote {} (criteria: {} pass, {} fail, {} not measured)\n", o.json_path, passed, failed,
             unmeasured);
  for (const auto &c : document["criteria"])
    if (c.value("status", "") == "fail")
      fmt::print(stderr, "  FAIL {}: {} (needs {})\n", c.value("name", ""), c.value("value", ""),
                 c.value("threshold", ""));
  if (!o.html_path.empty()) {
    report::write_html_page(document, o.html_path);
    fmt::print(stderr, "wrote {}\n", o.html_path);
  }
}

void setup(CLI::App &app) {
  auto o = std::make_shared<ReportCliOptions>();
  auto *cmd = app.add_subcommand("report", "run every step this machine can run and write the report JSON (and page)");
  cmd->add_option("--json", o->json_path, "path of the JSON document to write")->required();
  cmd->add_option("--html", o->html_path, "also write the self-contained HTML page here");
  cmd->add_flag("--quick", o->quick, "small sizes (seconds; for tests)");
  cmd->add_option("--merge", o->merge_files,
                  "JSON to fold in: bench/compare_sdpa.py output (steps.peers) or another (partial) report")
      ->check(CLI::ExistingFile);
  cmd->add_option("--steps", o->steps,
                  "comma-separated steps to run (default all: " +
                      fmt::format("{}", fmt::join(report::registered_step_names(), ",")) +
                      "; `none`: measure nothing, assemble the --merge files)")
      ->delimiter(',');
  cmd->add_option("--python", o->python,
                  "Python with PyTorch for the peers step (SDPA on the same shapes); default $FLASHBOX_PYTHON, "
                  "else python3 or python on PATH");
  cmd->add_option("--seed", o->seed, "seed of every random input")->capture_default_str();
  cmd->add_option("--weights", o->weights,
                  "the gpt2 step on this trained checkpoint (llm.c .bin or safetensors) instead of seeded weights; "
                  "its model_N.json from `flashbox gpt2 train`, if beside it, says what it was trained on")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tokens", o->tokens, "held-out token shard (llm.c format) for --weights' gpt2 step")
      ->check(CLI::ExistingFile);
  cmd->add_option("--training", o->training,
                  "the trained model's loss curves and samples for the page (`flashbox gpt2 curves` output); "
                  "default: docs/gpt2-run/training.json when the source tree has one")
      ->check(CLI::ExistingFile);
  cmd->callback([o] { run(*o); });
}

FLASHBOX_COMMAND(80, setup);

}  // namespace cmd_report
}  // namespace flashbox::cli
