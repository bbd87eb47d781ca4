// Every failure in src/gpt2 (bad checkpoint, bad token file, bad tokenizer files, bad arguments) is a
// Gpt2Error whose message names the file and what is wrong with it; the CLI prints it and exits 1.
#pragma once
#include <stdexcept>
#include <string>

namespace flashbox::gpt2 {

struct Gpt2Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace flashbox::gpt2
