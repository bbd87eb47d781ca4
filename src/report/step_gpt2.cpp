// Report step "gpt2" (SPEC step 5): one model, one token stream, every attention implementation of
// the device, the same loss. With a GPU: the 124M config with seeded weights, 65,536 tokens in
// windows of 1,024, naive and flash on CUDA. Without: the `tiny` config (2 layers, 128 channels,
// GPT-2's vocabulary, so the LM head is still 50,257 wide) on 4,096 tokens in windows of 256, naive and
// blocked on the CPU: about 10 s of CPU time each on two cores. No pretrained weights exist here, so both use `gpt2 init`'s seeded initialisation;
// the text is the repository's own documents and GPT-2 sources, BPE-encoded.
// With `flashbox report --weights FILE [--tokens SHARD]`: a trained checkpoint instead, on the held-out
// shard (131,072 tokens, or all it has: issue 46's bar), naive and flash on CUDA and then naive and blocked on the CPU on
// one window (a 124M model's CPU forward is slow) -- or only the CPU's rows on a machine without a GPU;
// windows of 1,024 tokens (the model's context if shorter; a shard shorter still is one window);
// the model_N.json that `flashbox gpt2 train` writes beside the checkpoint becomes steps.gpt2.trained.
#include "report/step_registry.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/error.hpp"
#include "gpt2/eval/evaluate.hpp"
#include "gpt2/tokenizer/bpe_tokenizer.hpp"
#include "gpt2/tokens/sample_text.hpp"
#include "gpt2/tokens/token_files.hpp"

namespace flashbox::report {
namespace {

using namespace flashbox::gpt2;

// The provenance file beside a checkpoint: model_N.json for model_N.bin / model_N.safetensors.
nlohmann::json read_provenance(const std::string &weights) {
  std::filesystem::path p(weights);
  p.replace_extension(".json");
  std::ifstream in(p);
  if (!in) return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception &) {
    return nullptr;
  }
}

nlohmann::json run_trained(ReportContext &ctx) {
  const bool gpu = ctx.has_gpu;
  ctx.progress("gpt2: loading " + ctx.gpt2_weights, 0, 1);
  const Gpt2Weights w = load_checkpoint(ctx.gpt2_weights);
  const Gpt2Config &c = w.config();
  const int max_window = std::min(1024, c.n_ctx);
  std::vector<int32_t> tokens;
  std::string text;
  if (!ctx.gpt2_tokens.empty()) {
    tokens = read_token_file(ctx.gpt2_tokens);
    text = "held-out shard " + std::filesystem::path(ctx.gpt2_tokens).filename().string();
  } else {
    const std::string encoder = default_encoder_json_path(), vocab = default_vocab_bpe_path();
    if (encoder.empty() || vocab.empty())
      return {{"measured", false}, {"reason", "--weights without --tokens needs the GPT-2 tokenizer files"}};
    BpeTokenizer tokenizer(encoder, vocab);
    const SampleText sample = repository_sample_text(size_t(max_window) * 16);
    tokens = tokenizer.encode(sample.text);
    text = sample.description;
  }
  // A shard shorter than that (but for the last token, the target of none) is one window of its length.
  const int seqlen = int(std::min<int64_t>(max_window, std::max<int64_t>(2, int64_t(tokens.size()) - 1)));
  EvalOptions o;
  o.seqlen = seqlen;
  o.progress = ctx.progress;
  EvalResult r;
  if (gpu) {
    o.device = FLASHBOX_CUDA;
    o.batch = 16;
    o.count = std::min<int64_t>(int64_t(tokens.size()) - 1, ctx.quick ? 16384 : 131072);
    r = evaluate(w, tokens, o);
  }
  // The CPU's rows: one window (the same first tokens), naive and blocked.
  EvalOptions oc = o;
  oc.device = FLASHBOX_CPU;
  oc.batch = 1;
  oc.count = seqlen;
  const EvalResult rc = evaluate(w, tokens, oc);
  if (!gpu) r = rc;
  nlohmann::json j = to_json(r, fmt::format("{} ({})", std::filesystem::path(ctx.gpt2_weights).filename().string(),
                                            read_provenance(ctx.gpt2_weights).is_object() ? "trained by flashbox"
                                                                                           : "checkpoint"));
  if (gpu) {
    nlohmann::json cpu = to_json(rc, "");
    for (auto &row : cpu["rows"]) {
      row["tokens"] = rc.tokens;
      j["rows"].push_back(row);
    }
    j["cpu_tokens"] = rc.tokens;
  }
  j["text"] = text;
  j["trained"] = read_provenance(ctx.gpt2_weights);
  return j;
}

nlohmann::json run_gpt2(ReportContext &ctx) {
  if (!ctx.gpt2_weights.empty()) return run_trained(ctx);
  const bool gpu = ctx.has_gpu;
  const std::string config_name = gpu ? "gpt2" : "tiny";
  const int seqlen = gpu ? 1024 : 256;
  const int64_t count = gpu ? (ctx.quick ? 16384 : 65536) : (ctx.quick ? 1024 : 4096);

  const std::string encoder = default_encoder_json_path(), vocab = default_vocab_bpe_path();
  if (encoder.empty() || vocab.empty())
    return {{"measured", false},
            {"reason",
             "GPT-2 tokenizer files not found (scripts/install-deps.sh installs them under tests/gpt2/node)"}};
  ctx.progress("gpt2: tokenizing text", 0, 1);
  BpeTokenizer tokenizer(encoder, vocab);
  // Code and prose run 2-4 bytes per token; take more text until `count` tokens exist.
  SampleText sample;
  std::vector<int32_t> tokens;
  for (size_t bytes = size_t(count) * 4; int64_t(tokens.size()) < count; bytes *= 2) {
    sample = repository_sample_text(bytes);
    tokens = tokenizer.encode(sample.text);
  }

  ctx.progress("gpt2: seeded weights", 0, 1);
  Gpt2Weights w(config_by_name(config_name));
  init_gpt2_weights(w, ctx.seed);

  EvalOptions o;
  o.device = gpu ? FLASHBOX_CUDA : FLASHBOX_CPU;
  o.seqlen = seqlen;
  o.count = count;
  o.batch = gpu ? 16 : 4;
  o.progress = ctx.progress;
  const EvalResult r = evaluate(w, tokens, o);
  nlohmann::json j = to_json(r, fmt::format("seeded {} (gpt2 init, seed {})", config_name, ctx.seed));
  j["text"] = sample.description;
  return j;
}

FLASHBOX_REPORT_STEP(60, "gpt2", run_gpt2);

}  // namespace
}  // namespace flashbox::report
