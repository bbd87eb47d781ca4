// Report step "gpt2" (SPEC step 5): one model, one token stream, every attention implementation of
// the device, the same loss. With a GPU: the 124M config with seeded weights, 65,536 tokens in
// windows of 1,024, naive and flash on CUDA. Without: the `tiny` config (2 layers, 128 channels,
// GPT-2's vocabulary, so the LM head is still 50,257 wide) on 4,096 tokens in windows of 256, naive and
// blocked on the CPU: about 10 s of CPU time each on two cores. No pretrained weights exist here, so both use `gpt2 init`'s seeded initialisation;
// the text is the repository's own documents and GPT-2 sources, BPE-encoded.
#include "report/step_registry.hpp"

#include <fmt/core.h>

#include "gpt2/error.hpp"
#include "gpt2/eval/evaluate.hpp"
#include "gpt2/tokenizer/bpe_tokenizer.hpp"
#include "gpt2/tokens/sample_text.hpp"

namespace flashbox::report {
namespace {

using namespace flashbox::gpt2;

nlohmann::json run(ReportContext &ctx) {
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

FLASHBOX_REPORT_STEP(60, "gpt2", run);

}  // namespace
}  // namespace flashbox::report
