// GPT-2 decoding with the KV cache (gpt2/model/cpu_decoder.hpp): every fed position's logits equal the
// full-window forward's at that position, for a prompt fed at once and tokens fed one by one; greedy
// decoding equals argmax over full recomputation; the sampler (greedy, top-k, temperature, seeded);
// `flashbox gpt2 generate` as a user runs it (deterministic with a seed, JSON, clear errors).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpt2/model/cpu_decoder.hpp"
#include "gpt2/model/cpu_forward.hpp"
#include "gpt2/model/sampling.hpp"
#include "gpt2_test_util.hpp"
#include "support/cli_runner.hpp"

using namespace flashbox::gpt2;

namespace {

double max_rel_diff(const float *a, const float *b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) num = std::max(num, double(std::abs(a[i] - b[i]))), den = std::max(den, double(std::abs(b[i])));
  return num / std::max(den, 1e-30);
}

TEST(Gpt2Decoder, CachedLogitsEqualTheFullWindow) {
  const Gpt2Config c = gpt2_test::micro_config();
  const Gpt2Weights w = gpt2_test::seeded(c, 5);
  const std::vector<int32_t> tokens = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26};
  CpuGpt2 full(w);
  const std::vector<float> want = full.logits(tokens.data(), int(tokens.size()), FLASHBOX_BLOCKED);  // [T, V]
  CpuGpt2Decoder dec(w, int(tokens.size()));
  const int prompt = 7;
  std::vector<float> got = dec.feed(tokens.data(), prompt);
  EXPECT_LT(max_rel_diff(got.data(), want.data() + (prompt - 1) * c.vocab_size, c.vocab_size), 1e-4) << "prefill";
  for (int t = prompt; t < int(tokens.size()); ++t) {
    got = dec.feed(&tokens[size_t(t)], 1);
    EXPECT_LT(max_rel_diff(got.data(), want.data() + int64_t(t) * c.vocab_size, c.vocab_size), 1e-4) << "position " << t;
  }
  EXPECT_EQ(dec.length(), int(tokens.size()));
  EXPECT_NE(gpt2_test::error_of([&] { dec.feed(tokens.data(), 1); }).find("overflows the KV cache"), std::string::npos);
}

TEST(Gpt2Decoder, GreedyEqualsArgmaxOfFullRecomputation) {
  const Gpt2Weights w = gpt2_test::seeded(gpt2_test::micro_config(), 8);
  std::vector<int32_t> seq = {1, 2, 3};
  CpuGpt2Decoder dec(w, 20);
  TokenSampler greedy(0.0f, 0, 1);
  const std::vector<float> *logits = &dec.feed(seq.data(), int(seq.size()));
  CpuGpt2 full(w);
  for (int i = 0; i < 10; ++i) {
    const int32_t next = greedy.next(*logits);
    const std::vector<float> all = full.logits(seq.data(), int(seq.size()), FLASHBOX_NAIVE);
    const float *last = all.data() + (seq.size() - 1) * 97;
    EXPECT_EQ(next, int32_t(std::max_element(last, last + 97) - last)) << "step " << i;
    seq.push_back(next);
    logits = &dec.feed(&next, 1);
  }
}

TEST(TokenSampler, GreedyTopKTemperatureAndSeed) {
  const std::vector<float> logits = {0.0f, std::log(3.0f), -50.0f, std::log(3.0f) - 1e-3f};
  EXPECT_EQ(TokenSampler(0.0f, 0, 1).next(logits), 1);
  TokenSampler top1(1.0f, 1, 7);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(top1.next(logits), 1);
  // Temperature 1 over {0, 1} (top-k 2): token 1 three times as likely as token 0.
  const std::vector<float> two = {0.0f, std::log(3.0f)};
  TokenSampler a(1.0f, 0, 42), b(1.0f, 0, 42);
  int ones = 0;
  for (int i = 0; i < 4000; ++i) {
    const int32_t x = a.next(two);
    EXPECT_EQ(x, b.next(two)) << "the same seed gave another draw at " << i;
    ones += x == 1;
  }
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
  // A high temperature flattens: token 0 drawn far more often than at temperature 1.
  TokenSampler hot(100.0f, 0, 3);
  int zeros = 0;
  for (int i = 0; i < 2000; ++i) zeros += hot.next(two) == 0;
  EXPECT_NEAR(zeros / 2000.0, 0.5, 0.05);
  EXPECT_NE(gpt2_test::error_of([] { TokenSampler(-1.0f, 0, 1); }).find("temperature"), std::string::npos);
  EXPECT_NE(gpt2_test::error_of([] { TokenSampler(1.0f, -2, 1); }).find("top-k"), std::string::npos);
}

TEST(Gpt2GenerateCli, SeededJsonAndErrors) {
  const std::string cmd = "gpt2 generate --init tiny --init-seed 2 --prompt-tokens 464,2068,7586 --tokens 6 --seed 9 --json";
  const flashbox::test::CliResult r1 = flashbox::test::run_cli(cmd), r2 = flashbox::test::run_cli(cmd);
  ASSERT_EQ(r1.exit_code, 0) << r1.err << r1.out;
  const auto j = nlohmann::json::parse(r1.out);
  ASSERT_EQ(j["tokens"].size(), 6u);
  EXPECT_EQ(j["prompt_tokens"], nlohmann::json({464, 2068, 7586}));
  ASSERT_EQ(r2.exit_code, 0) << r2.err << r2.out;
  EXPECT_EQ(j["tokens"], nlohmann::json::parse(r2.out)["tokens"]) << "the same seed must give the same tokens";
  for (const auto &t : j["tokens"]) EXPECT_TRUE(t.get<int>() >= 0 && t.get<int>() < 50257);
  const flashbox::test::CliResult bad = flashbox::test::run_cli("gpt2 generate --init tiny --prompt-tokens 1,x --tokens 2");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE((bad.err + bad.out).find("'x' is not a token id"), std::string::npos) << bad.err << bad.out;
  const flashbox::test::CliResult big =
      flashbox::test::run_cli("gpt2 generate --init tiny --prompt-tokens 1 --tokens 100000");
  EXPECT_NE(big.exit_code, 0);
  EXPECT_NE((big.err + big.out).find("exceed the model's context"), std::string::npos) << big.err << big.out;
}

}  // namespace
