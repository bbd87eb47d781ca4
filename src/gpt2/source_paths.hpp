// Files of the flashbox source tree that GPT-2 uses at run time (the tokenizer's encoder.json and
// vocab.bpe, the repository text the report evaluates on), found without configuration: relative to
// the working directory, to the executable's folder and its parent (build dirs sit in the tree), and
// to the source tree the binary was compiled from.
#pragma once
#include <filesystem>
#include <optional>

namespace flashbox::gpt2 {

// The first candidate root that holds `relative`, or nullopt.
std::optional<std::filesystem::path> find_source_root_with(const std::filesystem::path &relative);

}  // namespace flashbox::gpt2
