// Fuzz target: an llm.c checkpoint (gpt2_124M.bin layout) of arbitrary bytes. read_llmc_checkpoint
// must return weights whose size matches the header's config or throw Gpt2Error; load_checkpoint
// (which picks the reader from the first bytes) must do the same.
#include <cstdint>
#include <exception>

#include "fuzz_support.hpp"
#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/error.hpp"

using namespace flashbox::gpt2;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static flashbox::fuzz::ScratchFile file("model.bin");
  const std::string &path = file.write(data, size);
  try {
    const Gpt2Weights w = read_llmc_checkpoint(path);
    if (w.size() != parameter_count(w.config())) __builtin_trap();
  } catch (const Gpt2Error &) {
  } catch (const std::exception &e) {
    flashbox::fuzz::unexpected_exception(e.what());
  }
  try {
    load_checkpoint(path);
  } catch (const Gpt2Error &) {
  } catch (const std::exception &e) {
    flashbox::fuzz::unexpected_exception(e.what());
  }
  return 0;
}
