// Fuzz target: GPT-2's tokenizer (the published encoder.json and vocab.bpe, found where
// scripts/install-deps.sh installs them) on arbitrary bytes, valid UTF-8 or not. Encoding must
// never fail, every id must be in the vocabulary, and decoding must give back the exact bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "gpt2/tokenizer/bpe_tokenizer.hpp"

using namespace flashbox::gpt2;

namespace {

const BpeTokenizer &pristine() {
  static std::unique_ptr<BpeTokenizer> tok = [] {
    const std::string encoder = default_encoder_json_path(), vocab = default_vocab_bpe_path();
    if (encoder.empty() || vocab.empty()) {
      std::fprintf(stderr,
                   "fuzz_tokenizer_encode: GPT-2's encoder.json / vocab.bpe not found "
                   "(run ./scripts/install-deps.sh)\n");
      std::exit(1);
    }
    return std::make_unique<BpeTokenizer>(encoder, vocab);
  }();
  return *tok;
}

// encode() caches every piece it has seen; a fresh copy now and then keeps a long run's memory flat.
BpeTokenizer &tokenizer() {
  static BpeTokenizer work = pristine();
  static unsigned calls = 0;
  if (++calls % 4096 == 0) work = pristine();
  return work;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  pristine();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  BpeTokenizer &tok = tokenizer();
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  const std::vector<int32_t> ids = tok.encode(text);
  if (size > 0 && ids.empty()) __builtin_trap();
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  if (tok.decode(ids) != text) __builtin_trap();
  return 0;
}
