// Steps of `flashbox report` register themselves: each src/report/step_<name>.cpp defines a run
// function and writes FLASHBOX_REPORT_STEP(order, "name", run) once. report.cpp runs them in order and
// stores each result under steps.<name> of the JSON (docs/report-schema.md).
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace flashbox::report {

struct ReportContext {
  bool has_gpu = false;  // a CUDA device is present and the build has CUDA
  bool quick = false;    // smaller sizes (tests)
  unsigned seed = 1234;
  std::string python;  // the Python (with torch) for the peers step; empty: look for one
  // The gpt2 step on a trained checkpoint instead of seeded weights, on this token shard (llm.c
  // format; empty: the repository's text).
  std::string gpt2_weights, gpt2_tokens;
  // The gpt2_training step's run document (`flashbox gpt2 curves`); empty: the committed one, if any.
  std::string gpt2_training;
  // Reports progress of long work on the terminal: (what, done, total).
  std::function<void(const std::string &, int, int)> progress = [](const std::string &, int, int) {};
  nlohmann::json *document = nullptr;  // the whole document so far (steps run earlier are readable)
};

using StepRun = nlohmann::json (*)(ReportContext &ctx);

struct StepEntry {
  int order;
  const char *name;
  StepRun run;
};

std::vector<StepEntry> &step_registry();
bool register_step(int order, const char *name, StepRun run);

}  // namespace flashbox::report

#define FLASHBOX_REPORT_CONCAT_INNER(a, b) a##b
#define FLASHBOX_REPORT_CONCAT(a, b) FLASHBOX_REPORT_CONCAT_INNER(a, b)
#define FLASHBOX_REPORT_STEP(order, name, run) \
  static const bool FLASHBOX_REPORT_CONCAT(flashbox_report_step_registered_, __COUNTER__) = \
      ::flashbox::report::register_step(order, name, run)
