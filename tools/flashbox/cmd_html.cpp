// `flashbox html`: writes the self-contained report page for a report JSON measured here or elsewhere
// (e.g. on a GPU machine): `flashbox html --json runs/report.json --out runs/report.html`.
#include "command_registry.hpp"
#include "report/html_page.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

namespace flashbox::cli {
namespace cmd_html {

constexpr int kSchemaVersion = 1;  // docs/report-schema.md

struct HtmlOptions {
  std::string json_path;
  std::string out_path;
};

nlohmann::json read_report(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}", path));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error &e) {
    throw std::runtime_error(fmt::format("{} is not valid JSON (byte {}): {}", path, e.byte, e.what()));
  }
  if (!doc.is_object()) throw std::runtime_error(fmt::format("{}: a report is a JSON object", path));
  auto version = doc.find("schema_version");
  if (version == doc.end()) {
    throw std::runtime_error(fmt::format("{}: no schema_version; is this a `flashbox report --json` file?", path));
  }
  if (!version->is_number_integer()) {
    throw std::runtime_error(fmt::format("{}: schema_version must be an integer, got {}", path, version->dump()));
  }
  if (version->get<int64_t>() != kSchemaVersion) {
    throw std::runtime_error(fmt::format("{}: schema_version {} is not supported (this flashbox reads {})", path,
                                         version->get<int64_t>(), kSchemaVersion));
  }
  auto steps = doc.find("steps");
  if (steps == doc.end() || !steps->is_object()) {
    throw std::runtime_error(fmt::format("{}: \"steps\" must be an object (docs/report-schema.md)", path));
  }
  return doc;
}

void run_html(const HtmlOptions &o) {
  nlohmann::json doc = read_report(o.json_path);
  report::write_html_page(doc, o.out_path);
  fmt::print("wrote {}\n", o.out_path);
}

void setup(CLI::App &app) {
  auto o = std::make_shared<HtmlOptions>();
  auto *cmd = app.add_subcommand("html", "write the self-contained report page for a report JSON");
  cmd->add_option("--json", o->json_path, "report JSON written by `flashbox report --json`")->required();
  cmd->add_option("--out", o->out_path, "HTML file to write")->required();
  cmd->callback([o] { run_html(*o); });
}

FLASHBOX_COMMAND(90, setup);

}  // namespace cmd_html
}  // namespace flashbox::cli
