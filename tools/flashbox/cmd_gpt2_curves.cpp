// `flashbox gpt2 curves`: gathers one training run for the report page -- flashbox's `gpt2 train --log`,
// the PyTorch reference's log (bench/gpt2_train_torch.py train --log, or its --json), and samples that
// `gpt2 generate --json` wrote at a few checkpoints -- into the one JSON document that
// `flashbox report --training FILE` embeds (src/report/training_run.hpp). Prints the curves' summary.
#include "command_registry.hpp"

#include <fmt/core.h>

#include <memory>

#include "report/report.hpp"
#include "report/training_run.hpp"

namespace flashbox::cli {
namespace cmd_gpt2_curves {

struct CurvesCli {
  report::TrainingRunInputs in;
  std::string out;
};

void print_run(const nlohmann::json &r) {
  const auto &f = r["final"];
  fmt::print("{} ({}): {} steps logged, {} tokens seen, last loss {:.4f}", r["label"].get<std::string>(),
             r["file"].get<std::string>(), r["train"]["step"].size(), f["tokens"].get<int64_t>(),
             f["loss"].get<double>());
  if (f["val_loss"].is_number())
    fmt::print(", validation loss {:.4f} at step {}", f["val_loss"].get<double>(), f["val_step"].get<int64_t>());
  fmt::print("\n");
}

void run_curves(const CurvesCli &cli) {
  const nlohmann::json doc = report::build_training_run(cli.in);
  print_run(doc["flashbox"]);
  if (doc["reference"].is_object()) print_run(doc["reference"]);
  if (doc["reference_note"].is_string()) fmt::print("reference: {}\n", doc["reference_note"].get<std::string>());
  if (doc["gap"].is_object())
    for (const char *which : {"train", "val"}) {
      const auto &g = doc["gap"][which];
      if (g.is_object())
        fmt::print("{} loss: max |flashbox - reference| {:.6f} at step {} ({} shared steps)\n", which,
                   g["max_abs"].get<double>(), g["at_step"].get<int64_t>(), g["points"].get<int64_t>());
    }
  fmt::print("{} samples\n", doc["samples"].size());
  report::write_json_file(doc, cli.out);
  fmt::print("wrote {}\n", cli.out);
}

void setup(CLI::App &app) {
  CLI::App *gpt2 = app.get_subcommand("gpt2");
  auto cli = std::make_shared<CurvesCli>();
  auto *c = gpt2->add_subcommand(
      "curves", "gather a training run's loss curves (flashbox and PyTorch) and samples into the page's JSON");
  c->add_option("--log", cli->in.log, "flashbox's `gpt2 train --log` JSON-lines file")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--reference-log", cli->in.reference_log,
                "PyTorch's log of the same recipe: bench/gpt2_train_torch.py train --log (JSON lines) or --json")
      ->check(CLI::ExistingFile);
  c->add_option("--samples", cli->in.samples, "`gpt2 generate --json` outputs (each one sample or an array)")
      ->check(CLI::ExistingFile);
  c->add_option("--out", cli->out, "the JSON to write (for `flashbox report --training`)")->required();
  c->callback([cli] { run_curves(*cli); });
}

FLASHBOX_COMMAND(63, setup);

}  // namespace cmd_gpt2_curves
}  // namespace flashbox::cli
