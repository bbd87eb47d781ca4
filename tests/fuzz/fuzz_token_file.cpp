// Fuzz target: a token file (llm.c shard or raw uint16 array) of arbitrary bytes. read_token_file
// must return tokens in 0..65535, as many as the file says, or throw Gpt2Error.
#include <cstdint>
#include <exception>

#include "fuzz_support.hpp"
#include "gpt2/error.hpp"
#include "gpt2/tokens/token_files.hpp"

using namespace flashbox::gpt2;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static flashbox::fuzz::ScratchFile file("tokens.bin");
  const std::string &path = file.write(data, size);
  try {
    const std::vector<int32_t> tokens = read_token_file(path);
    if (tokens.empty() || tokens.size() > size / 2) __builtin_trap();
    for (int32_t t : tokens)
      if (t < 0 || t > 0xffff) __builtin_trap();
  } catch (const Gpt2Error &) {
  } catch (const std::exception &e) {
    flashbox::fuzz::unexpected_exception(e.what());
  }
  return 0;
}
