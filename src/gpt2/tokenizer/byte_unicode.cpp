#include "gpt2/tokenizer/byte_unicode.hpp"

#include <cstdint>
#include <unordered_map>

namespace flashbox::gpt2 {

const std::array<char32_t, 256> &byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    // Printable Latin-1 bytes keep their own code point; the rest (controls, space, 0x7f-0xa0,
    // soft hyphen) are moved past 0xff in byte order so that no token contains whitespace.
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    };
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) t[size_t(b)] = printable(b) ? char32_t(b) : next++;
    return t;
  }();
  return table;
}

std::optional<std::string> unmap_token(std::string_view mapped) {
  static const std::unordered_map<char32_t, uint8_t> inverse = [] {
    std::unordered_map<char32_t, uint8_t> m;
    for (int b = 0; b < 256; ++b) m[byte_to_unicode()[size_t(b)]] = uint8_t(b);
    return m;
  }();
  std::string out;
  size_t i = 0;
  while (i < mapped.size()) {
    // Mapped characters are all below U+0144, so one or two UTF-8 bytes each.
    const auto b0 = uint8_t(mapped[i]);
    char32_t cp;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 >> 5) == 6 && i + 1 < mapped.size() && (uint8_t(mapped[i + 1]) >> 6) == 2) {
      cp = (char32_t(b0 & 0x1f) << 6) | (uint8_t(mapped[i + 1]) & 0x3f);
      i += 2;
    } else {
      return std::nullopt;
    }
    auto it = inverse.find(cp);
    if (it == inverse.end()) return std::nullopt;
    out.push_back(char(it->second));
  }
  return out;
}

}  // namespace flashbox::gpt2
