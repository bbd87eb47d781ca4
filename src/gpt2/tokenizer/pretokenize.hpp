// GPT-2's pre-tokenisation: splits text into the pieces the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matches, written out by hand (no regex engine): at each position the alternatives are tried in
// order, as a backtracking engine would. BPE then runs inside each piece only.
#pragma once
#include <string_view>
#include <vector>

namespace flashbox::gpt2 {

// Pieces are views into `text` (UTF-8) and cover it exactly, in order. Bytes that are not valid UTF-8
// are kept, each as a one-byte piece of class "other", so that every byte is still encoded.
std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace flashbox::gpt2
