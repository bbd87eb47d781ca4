// Real English-and-code text that ships with flashbox, for evaluating when the user brings none (the
// report): the repository's documents and the GPT-2 sources, in a fixed order, repeated until long
// enough.
#pragma once
#include <cstddef>
#include <string>

namespace flashbox::gpt2 {

struct SampleText {
  std::string text;
  std::string description;  // which files, and whether they were repeated
};

// Throws Gpt2Error when the source tree cannot be found.
SampleText repository_sample_text(size_t min_bytes);

}  // namespace flashbox::gpt2
