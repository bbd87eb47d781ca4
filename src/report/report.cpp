#include "report/report.hpp"

#include "report/criteria.hpp"
#include "report/cuda_device.hpp"
#include "report/machine_info.hpp"
#include "report/training_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace flashbox::report {
namespace {

using nlohmann::json;

// Steps the page expects, with why each may be missing; a step nobody registered still appears.
const std::vector<std::pair<const char *, const char *>> kExpectedSteps = {
    {"memory", "the memory step is not part of this build"},
    {"softmax_trace", "the online softmax step is not part of this build"},
    {"blocking", "the blocking step is not part of this build"},
    {"check", "the correctness step is not part of this build"},
    {"bench", "the benchmark step is not part of this build"},
    {"fp8", "the FP8 comparison step is not part of this build"},
    {"peers",
     "the PyTorch SDPA step is not part of this build (a peers document measured elsewhere can be "
     "merged with `flashbox report --merge FILE`)"},
    {"gpt2", "the GPT-2 step is not part of this build"},
    {"gpt2_training", "the GPT-2 training-run step is not part of this build"},
};

}  // namespace

json not_measured_step(const std::string &reason) { return {{"measured", false}, {"reason", reason}}; }

json read_json_file(const std::string &path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot open {}", path));
  try {
    return json::parse(in);
  } catch (const json::parse_error &e) {
    throw std::runtime_error(fmt::format("{} is not valid JSON: {}", path, e.what()));
  }
}

void write_json_file(const json &document, const std::string &path) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error(fmt::format("cannot write {}", path));
    out << document.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    if (!out) throw std::runtime_error(fmt::format("writing {} failed", path));
  }
  std::filesystem::rename(tmp, p);  // a reader never sees half a document
}

void merge_document(json &document, const json &other, const std::string &source) {
  if (!other.is_object()) throw std::runtime_error(fmt::format("{}: expected a JSON object", source));
  if (other.contains("schema_version") && other["schema_version"] != kSchemaVersion)
    throw std::runtime_error(fmt::format("{}: schema_version {} (this flashbox writes {})", source,
                                         other["schema_version"].dump(), kSchemaVersion));
  json steps;
  if (other.contains("steps") && other["steps"].is_object()) {
    steps = other["steps"];
  } else if (other.contains("rows") && other["rows"].is_array()) {
    steps = json{{"peers", other}};  // a peers document on its own
    if (!steps["peers"].contains("measured")) steps["peers"]["measured"] = !other["rows"].empty();
  } else {
    throw std::runtime_error(
        fmt::format("{}: neither a report (no \"steps\") nor a peers document (no \"rows\")", source));
  }
  json merged_names = json::array();
  for (auto &[name, step] : steps.items()) {
    const bool incoming_measured = step.is_object() && step.value("measured", false);
    const bool have_measured = document["steps"].contains(name) && document["steps"][name].value("measured", false);
    if (name == "peers" && incoming_measured && have_measured) {
      // Several peers runs (forward, backward, non-causal) complement each other: keep every row.
      for (const auto &row : step["rows"]) document["steps"][name]["rows"].push_back(row);
      merged_names.push_back(name);
    } else if (incoming_measured || !have_measured) {
      document["steps"][name] = step;
      merged_names.push_back(name);
    }
  }
  json record = {{"file", source}, {"steps", merged_names}};
  if (other.contains("machine")) record["machine"] = other["machine"];
  document["merged"].push_back(std::move(record));
}

std::vector<std::string> registered_step_names() {
  auto steps = step_registry();
  std::stable_sort(steps.begin(), steps.end(),
                   [](const StepEntry &a, const StepEntry &b) { return a.order < b.order; });
  std::vector<std::string> names;
  for (const auto &s : steps) names.push_back(s.name);
  return names;
}

json run_report(const ReportOptions &options) {
  json doc;
  doc["schema_version"] = kSchemaVersion;
  doc["generated_at"] = utc_timestamp();
  doc["machine"] = machine_description();
  doc["steps"] = json::object();
  doc["merged"] = json::array();

  ReportContext ctx;
  ctx.has_gpu = gpu_info().has_value();
  ctx.quick = options.quick;
  ctx.seed = options.seed;
  ctx.python = options.python;
  ctx.gpt2_weights = options.gpt2_weights;
  ctx.gpt2_tokens = options.gpt2_tokens;
  ctx.gpt2_training = options.gpt2_training;
  ctx.progress = options.progress;
  ctx.document = &doc;

  auto steps = step_registry();
  std::stable_sort(steps.begin(), steps.end(),
                   [](const StepEntry &a, const StepEntry &b) { return a.order < b.order; });
  const auto registered = registered_step_names();
  // `--steps none` measures nothing here: the document is assembled from --merge files alone.
  const bool merge_only = options.only_steps == std::vector<std::string>{"none"};
  for (const auto &name : options.only_steps)
    if (!merge_only && std::find(registered.begin(), registered.end(), name) == registered.end())
      throw std::invalid_argument(
          fmt::format("unknown report step '{}' (steps: {})", name, fmt::join(registered, ", ")));
  std::vector<std::string> skipped;
  if (!options.only_steps.empty()) {
    std::vector<StepEntry> selected;
    for (const auto &s : steps) {
      if (std::find(options.only_steps.begin(), options.only_steps.end(), s.name) != options.only_steps.end())
        selected.push_back(s);
      else
        skipped.push_back(s.name);
    }
    steps = std::move(selected);
  }
  // Read the merged files first so a bad path fails before minutes of measuring.
  std::vector<std::pair<std::string, json>> merges;
  for (const auto &path : options.merge_files) merges.emplace_back(path, read_json_file(path));

  const int count = static_cast<int>(steps.size());
  for (int i = 0; i < count; ++i) {
    const StepEntry &step = steps[static_cast<size_t>(i)];
    options.on_step_start(step.name, i + 1, count);
    const auto start = std::chrono::steady_clock::now();
    json result;
    try {
      result = step.run(ctx);
    } catch (const std::exception &e) {
      // One broken step must not cost the others' results: it is recorded, and the criteria that
      // depend on it show "not measured" with this reason.
      result = not_measured_step(fmt::format("the step failed: {}", e.what()));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (result.is_object()) result["seconds"] = seconds;
    doc["steps"][step.name] = std::move(result);
    options.on_step_end(step.name, seconds);
  }
  if (!merge_only)
    for (const auto &name : skipped) doc["steps"][name] = not_measured_step("not selected (flashbox report --steps)");
  for (const auto &[path, other] : merges) merge_document(doc, other, path);
  // A run document named by --training is data to show, not a measurement: it is on the page even when
  // the gpt2_training step was not selected (`--steps none --merge gpu.json --training training.json`),
  // in place of one a merged report carries.
  if (!options.gpt2_training.empty()) doc["steps"]["gpt2_training"] = training_step_from_file(options.gpt2_training);
  if (merge_only) {
    // Nothing was measured on this machine, so the document describes the machine of the first merged
    // report (where its steps ran); this one is named as where the files were assembled.
    for (const auto &[path, other] : merges)
      if (other.contains("machine")) {
        doc["assembled_on"] = doc["machine"];
        doc["machine"] = other["machine"];
        break;
      }
  }
  for (const auto &[name, reason] : kExpectedSteps)
    if (!doc["steps"].contains(name)) doc["steps"][name] = not_measured_step(reason);
  doc["criteria"] = evaluate_criteria(doc);
  return doc;
}

}  // namespace flashbox::report
