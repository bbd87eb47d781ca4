// The three character classes of GPT-2's pre-tokenisation regex: \p{L}, \p{N} and \s, with the
// meanings JavaScript's /u regexes give them (the reference, Encoder.js, runs on that engine).
#pragma once
#include <cstdint>

namespace flashbox::gpt2 {

bool is_letter(char32_t cp);
bool is_number(char32_t cp);
bool is_space(char32_t cp);

}  // namespace flashbox::gpt2
