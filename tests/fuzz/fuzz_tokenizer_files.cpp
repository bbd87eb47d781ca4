// Fuzz target: GPT-2 tokenizer files of arbitrary bytes. The input is split at its first NUL byte
// into encoder.json (before) and vocab.bpe (after; empty when there is no NUL). BpeTokenizer must
// load them or throw Gpt2Error; a tokenizer that loads must encode text losslessly
// (decode(encode(x)) == x, every id inside the vocabulary), here on both file contents as text.
#include <cstdint>
#include <cstring>
#include <exception>
#include <string_view>

#include "fuzz_support.hpp"
#include "gpt2/error.hpp"
#include "gpt2/tokenizer/bpe_tokenizer.hpp"

using namespace flashbox::gpt2;

namespace {

void check_round_trip(BpeTokenizer &tok, std::string_view text) {
  const std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  if (tok.decode(ids) != text) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static flashbox::fuzz::ScratchFile encoder_file("encoder.json");
  static flashbox::fuzz::ScratchFile vocab_file("vocab.bpe");
  const auto *nul = static_cast<const uint8_t *>(std::memchr(data, 0, size));
  const size_t encoder_size = nul ? size_t(nul - data) : size;
  const size_t vocab_offset = nul ? encoder_size + 1 : size;
  encoder_file.write(data, encoder_size);
  vocab_file.write(data + vocab_offset, size - vocab_offset);
  try {
    BpeTokenizer tok(encoder_file.path(), vocab_file.path());
    check_round_trip(tok, std::string_view(reinterpret_cast<const char *>(data), encoder_size));
    check_round_trip(tok, std::string_view(reinterpret_cast<const char *>(data + vocab_offset), size - vocab_offset));
  } catch (const Gpt2Error &) {
  } catch (const std::exception &e) {
    flashbox::fuzz::unexpected_exception(e.what());
  }
  return 0;
}
