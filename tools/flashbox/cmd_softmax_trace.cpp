// `flashbox softmax-trace`: SPEC step 2. A row of scores read a block at a time, keeping only the
// running max m and l = sum exp(x - m), rescaled by exp(m_old - m_new) whenever the max grows.
#include "command_registry.hpp"
#include "cpu/online_softmax_trace.hpp"
#include "report/softmax_trace_json.hpp"
#include "text_table.hpp"

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <memory>

namespace flashbox::cli {
namespace cmd_softmax_trace {

struct TraceOptions {
  std::vector<double> values;
  int64_t block = 2;
  bool json = false;
};

std::string number(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : (v < 0 ? "-inf" : "inf"); }

void run(const TraceOptions &o) {
  const auto values = o.values.empty() ? cpu::default_trace_values() : o.values;
  const auto trace = cpu::online_softmax_trace(values, o.block);
  if (o.json) {
    fmt::print("{}\n", report::to_json(trace).dump(2));
    return;
  }
  std::vector<std::string> shown;
  for (double v : trace.values) shown.push_back(number(v));
  fmt::print("Online softmax of [{}], {} number(s) per block\n\n", fmt::join(shown, ", "), trace.block);
  TextTable table({"block", "read", "numbers read", "m (running max)", "l = sum exp(x - m)", "rescale exp(m_old - m)"});
  for (const auto &s : trace.steps) {
    std::vector<std::string> read;
    for (double v : s.block_values) read.push_back(number(v));
    table.add_row({std::to_string(s.block_index), fmt::format("[{}]", fmt::join(read, ", ")),
                   std::to_string(s.numbers_read), number(s.m), number(s.l), number(s.rescale)});
  }
  fmt::print("{}", table.render());
  std::vector<std::string> softmax;
  for (double v : trace.softmax) softmax.push_back(fmt::format("{:.6f}", v));
  fmt::print("\nsoftmax = exp(x - m) / l: [{}]\nmax abs error against the exact softmax: {:.3e}\n",
             fmt::join(softmax, ", "), trace.max_abs_error);
}

void setup(CLI::App &app) {
  auto o = std::make_shared<TraceOptions>();
  auto *cmd = app.add_subcommand("softmax-trace", "SPEC step 2: online softmax, block by block (m, l, rescale)");
  cmd->add_option("--values", o->values, "comma-separated scores (default: 8 numbers whose max grows 3 times)")
      ->delimiter(',');
  cmd->add_option("--block", o->block, "numbers read per block")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--json", o->json, "print JSON (steps.softmax_trace of docs/report-schema.md) instead of a table");
  cmd->callback([o] { run(*o); });
}

FLASHBOX_COMMAND(20, setup);

}  // namespace cmd_softmax_trace
}  // namespace flashbox::cli
