// GPT-2's reversible byte <-> printable-character map: encoder.json and vocab.bpe spell every token as
// a string of these characters (byte b is shown as U+00xx when printable, else as U+0100 + n).
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace flashbox::gpt2 {

// The code point that stands for byte b.
const std::array<char32_t, 256> &byte_to_unicode();

// Raw bytes of a token spelled in the mapped characters (UTF-8 of the code points above), or nullopt
// when `mapped` holds a character that stands for no byte.
std::optional<std::string> unmap_token(std::string_view mapped);

}  // namespace flashbox::gpt2
