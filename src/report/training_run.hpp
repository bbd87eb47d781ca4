// The training-run document that the page's "trained model" section draws (docs/report-schema.md,
// steps.gpt2_training): the loss curves of a `flashbox gpt2 train --log` run and of its PyTorch
// reference (bench/gpt2_train_torch.py), the gap between them at the steps both logged, and text
// sampled by `flashbox gpt2 generate --json` at a few checkpoints. `flashbox gpt2 curves` writes it;
// `flashbox report --training FILE` embeds it.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace flashbox::report {

// Where `flashbox report` looks for the committed run document when --training is not given.
inline constexpr const char *kCommittedTrainingRun = "docs/gpt2-run/training.json";

// One run's curves from its log. Two formats are read:
//  - JSON lines with an "event" per object (`flashbox gpt2 train --log`, and
//    `gpt2_train_torch.py train --log`): "start" (total_batch: tokens per optimizer step; start_step
//    when resumed), "step" (step, loss), "val" (step, val_loss, val_tokens), "summary". A resumed run
//    appends a new "start" to the same file; the points it logs again (steps after its start_step)
//    replace the earlier ones.
//  - the one JSON object of `gpt2_train_torch.py train --json` ("losses": the loss of steps 1..N,
//    "val_loss": after the last; "total_batch" if it says, else `fallback_tokens_per_step`, 0: an error).
// Returns {label, trainer, file, format, config, device, tokens_per_step, train: {step, tokens, loss},
// val: {step, tokens, loss}, final: {step, tokens, loss, val_loss}}, losses rounded to 1e-6 nats.
// Throws std::runtime_error naming the file (and line) for a missing, empty or malformed log.
nlohmann::json read_training_log(const std::string &path, int64_t fallback_tokens_per_step = 0);

// One `flashbox gpt2 generate --json` output (or a JSON array of them): prompt, text, sampler
// settings and the checkpoint they came from. Throws std::runtime_error naming the file.
std::vector<nlohmann::json> read_samples(const std::string &path);

// max |a - b| over the steps both curves hold: {points, max_abs, at_step}, or null if none is shared.
nlohmann::json curve_gap(const nlohmann::json &a, const nlohmann::json &b);

struct TrainingRunInputs {
  std::string log;                   // flashbox's --log (required)
  std::string reference_log;         // PyTorch's (empty: none)
  std::vector<std::string> samples;  // gpt2 generate --json outputs
};

// The whole document: {flashbox, reference | null, reference_note, gap: {train, val} | null, samples}.
nlohmann::json build_training_run(const TrainingRunInputs &in);

// Checks that `doc` has the shape build_training_run writes (a run document read back from a file);
// throws std::runtime_error naming `source` and the first field that is wrong.
void check_training_run(const nlohmann::json &doc, const std::string &source);

// The report's steps.gpt2_training from the run document at `path`: checked, "measured": true,
// "source": path. Throws std::runtime_error naming the file.
nlohmann::json training_step_from_file(const std::string &path);

}  // namespace flashbox::report
