// `flashbox report`: runs every registered step (step_registry.hpp) in order and assembles the one JSON
// document of docs/report-schema.md: schema_version, generated_at, machine, steps, criteria.
#pragma once
#include "report/step_registry.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace flashbox::report {

inline constexpr int kSchemaVersion = 1;

struct ReportOptions {
  bool quick = false;
  unsigned seed = 1234;
  std::vector<std::string> merge_files;  // peers JSON documents, or (partial) reports
  std::vector<std::string> only_steps;   // run just these registered steps (empty: all of them)
  std::string python;  // Python with torch for the peers step (else $FLASHBOX_PYTHON, else python3/python on PATH)
  std::string gpt2_weights, gpt2_tokens;  // the gpt2 step on this checkpoint and held-out shard
  std::string gpt2_training;  // the gpt2_training step's run document (empty: docs/gpt2-run/training.json if any)
  // Called as each step starts (name, 1-based index, count) and when it ends (with its seconds).
  std::function<void(const std::string &, int, int)> on_step_start = [](const std::string &, int, int) {};
  std::function<void(const std::string &, double)> on_step_end = [](const std::string &, double) {};
  // Progress inside a step: (what, done, total).
  std::function<void(const std::string &, int, int)> progress = [](const std::string &, int, int) {};
};

// Throws std::invalid_argument when only_steps names a step that is not registered.
nlohmann::json run_report(const ReportOptions &options);
std::vector<std::string> registered_step_names();  // in run order

// Folds `other` into `document`: a full or partial report's steps, or a bare peers document (one with
// "rows" and no "steps") as steps.peers. A measured step replaces what is there; an unmeasured one
// only fills a gap. Records the file under "merged". Throws std::runtime_error on a document of
// another schema_version.
void merge_document(nlohmann::json &document, const nlohmann::json &other, const std::string &source);

nlohmann::json read_json_file(const std::string &path);  // throws std::runtime_error naming the file
void write_json_file(const nlohmann::json &document, const std::string &path);

// The step object for a step that could not run here.
nlohmann::json not_measured_step(const std::string &reason);

}  // namespace flashbox::report
