// `flashbox memory`: SPEC step 1's arithmetic — the bytes of S and P next to Q+K+V+O.
#include "command_registry.hpp"
#include "report/dtype_names.hpp"
#include "report/memory_arith.hpp"
#include "text_table.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <memory>

namespace flashbox::cli {
namespace cmd_memory {

struct MemoryOptions {
  std::vector<int64_t> seqlens;
  int64_t batch = 4, heads = 12, head_dim = 64;
  std::string dtype = "bf16";
  bool json = false;
};

void run_memory(const MemoryOptions &o) {
  report::MemoryConfig config{o.batch, o.heads, o.head_dim, report::parse_dtype(o.dtype)};
  const auto seqlens = o.seqlens.empty() ? report::default_memory_seqlens() : o.seqlens;
  std::vector<report::MemoryRow> rows;
  for (int64_t t : seqlens) rows.push_back(report::memory_row(config, t));

  if (o.json) {
    nlohmann::json doc = {{"config", report::to_json(config)}, {"rows", nlohmann::json::array()}};
    for (const auto &r : rows) doc["rows"].push_back(report::to_json(r));
    fmt::print("{}\n", doc.dump(2));
    return;
  }
  fmt::print("Naive attention keeps S = QK^T and P = softmax(S), T x T per head ({} x {} heads, {}):\n\n", o.batch,
             o.heads, o.dtype);
  TextTable table({"T", "S", "P", "Q+K+V+O", "S / (Q+K+V+O)"});
  for (const auto &r : rows)
    table.add_row({std::to_string(r.seqlen), format_bytes(r.s_bytes), format_bytes(r.p_bytes),
                   format_bytes(r.qkvo_bytes), fmt::format("{:.2f}x", r.s_over_qkvo)});
  fmt::print("{}\nS grows as T^2, Q+K+V+O as T: the ratio is T / (4 * head_dim).\n", table.render());
}

void setup(CLI::App &app) {
  auto o = std::make_shared<MemoryOptions>();
  auto *cmd = app.add_subcommand("memory", "SPEC step 1: bytes of S, P and Q+K+V+O for naive attention");
  cmd->add_option("--seqlen", o->seqlens, "sequence length(s) T (default 512 ... 16384)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", o->batch, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--heads", o->heads, "attention heads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--head-dim", o->head_dim, "head dimension")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "element type")
      ->check(CLI::IsMember(report::dtype_names()))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print JSON instead of a table");
  cmd->callback([o] { run_memory(*o); });
}

FLASHBOX_COMMAND(10, setup);

}  // namespace cmd_memory
}  // namespace flashbox::cli
