// Fuzz target: a safetensors file of arbitrary bytes. The container reader (SafetensorsFile) must
// accept it or throw Gpt2Error; every entry it accepts must read as fp32 within the file; and the
// GPT-2 reader (read_hf_safetensors) on the same bytes must build weights or throw Gpt2Error.
#include <cstdint>
#include <exception>
#include <vector>

#include "fuzz_support.hpp"
#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/checkpoint/safetensors.hpp"
#include "gpt2/error.hpp"

using namespace flashbox::gpt2;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static flashbox::fuzz::ScratchFile file("model.safetensors");
  const std::string &path = file.write(data, size);
  try {
    const SafetensorsFile st(path);
    for (const auto &[name, e] : st.entries()) {
      if (e.numel() > (int64_t(1) << 22)) continue;  // larger than any input the fuzzer writes
      std::vector<float> out(size_t(e.numel()));
      try {
        st.read_f32(name, e.shape, out.data());
      } catch (const Gpt2Error &) {}
    }
  } catch (const Gpt2Error &) {
  } catch (const std::exception &e) {
    flashbox::fuzz::unexpected_exception(e.what());
  }
  try {
    const Gpt2Weights w = read_hf_safetensors(path);
    if (w.size() != parameter_count(w.config())) __builtin_trap();
  } catch (const Gpt2Error &) {
  } catch (const std::exception &e) {
    flashbox::fuzz::unexpected_exception(e.what());
  }
  return 0;
}
