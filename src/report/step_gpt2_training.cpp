// Report step "gpt2_training": the training run that the page's "trained model" section draws -- the
// loss curves of flashbox's trainer and of the PyTorch reference, and samples of generated text -- read
// from a run document that `flashbox gpt2 curves` wrote (training_run.hpp). Nothing is measured here:
// the run took GPU hours elsewhere. The document comes from `flashbox report --training FILE`, else from
// the committed docs/gpt2-run/training.json when the source tree has one; without either the step is
// "not measured" and the page names the command that makes one.
#include "report/report.hpp"
#include "report/step_registry.hpp"
#include "report/training_run.hpp"

#include "gpt2/source_paths.hpp"

namespace flashbox::report {
namespace {

nlohmann::json run_gpt2_training(ReportContext &ctx) {
  std::string path = ctx.gpt2_training;
  if (path.empty()) {
    const auto root = gpt2::find_source_root_with(kCommittedTrainingRun);
    if (!root)
      return not_measured_step(
          "no training run given: `flashbox gpt2 curves --log run.jsonl --out training.json` gathers one, "
          "`flashbox report --training training.json` shows it");
    path = (*root / kCommittedTrainingRun).string();
  }
  return training_step_from_file(path);
}

FLASHBOX_REPORT_STEP(65, "gpt2_training", run_gpt2_training);

}  // namespace
}  // namespace flashbox::report
