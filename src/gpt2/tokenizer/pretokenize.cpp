#include "gpt2/tokenizer/pretokenize.hpp"

#include <cstdint>

#include "gpt2/tokenizer/unicode_classes.hpp"

namespace flashbox::gpt2 {
namespace {

// One decoded code point and where its bytes start; invalid UTF-8 decodes to U+FFFD (an "other").
struct CodePoint {
  char32_t cp;
  size_t byte;
};

std::vector<CodePoint> decode_utf8(std::string_view s) {
  std::vector<CodePoint> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = uint8_t(s[i]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1f) : len == 3 ? (b0 & 0x0f) : (b0 & 0x07);
    bool ok = len > 0 && i + size_t(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const auto b = uint8_t(s[i + size_t(k)]);
      ok = (b >> 6) == 2;
      cp = (cp << 6) | (b & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8 either.
    static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (ok && (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))) ok = false;
    if (!ok) {
      out.push_back({0xfffd, i});
      i += 1;
    } else {
      out.push_back({cp, i});
      i += size_t(len);
    }
  }
  return out;
}

enum class Kind { Letter, Number, Space, Other };

Kind kind_of(char32_t cp) {
  if (is_letter(cp)) return Kind::Letter;
  if (is_number(cp)) return Kind::Number;
  if (is_space(cp)) return Kind::Space;
  return Kind::Other;
}

// Length (in code points) of the contraction at `i`, or 0.
size_t contraction_at(const std::vector<CodePoint> &cps, size_t i) {
  if (cps[i].cp != U'\'') return 0;
  auto at = [&](size_t k) { return i + k < cps.size() ? cps[i + k].cp : char32_t(0); };
  for (char32_t c : {U's', U't', U'm', U'd'})
    if (at(1) == c) return 2;
  if ((at(1) == U'r' && at(2) == U'e') || (at(1) == U'v' && at(2) == U'e') || (at(1) == U'l' && at(2) == U'l'))
    return 3;
  return 0;
}

}  // namespace

std::vector<std::string_view> pretokenize(std::string_view text) {
  const std::vector<CodePoint> cps = decode_utf8(text);
  const size_t n = cps.size();
  std::vector<Kind> kinds(n);
  for (size_t i = 0; i < n; ++i) kinds[i] = kind_of(cps[i].cp);

  std::vector<std::string_view> pieces;
  auto byte_at = [&](size_t i) { return i < n ? cps[i].byte : text.size(); };
  size_t i = 0;
  while (i < n) {
    size_t end = 0;  // one past the piece's last code point; 0 while no alternative matched
    if (size_t len = contraction_at(cps, i)) end = i + len;
    // " ?X+" for X = letters, numbers, "other" (not space, letter or number).
    for (Kind k : {Kind::Letter, Kind::Number, Kind::Other}) {
      if (end) break;
      size_t j = i + (cps[i].cp == U' ' ? 1 : 0);
      if (j < n && kinds[j] == k) {
        while (j < n && kinds[j] == k) ++j;
        end = j;
      }
    }
    if (!end && kinds[i] == Kind::Space) {
      size_t run = i;
      while (run < n && kinds[run] == Kind::Space) ++run;
      // \s+(?!\S): the whole run at the end of text; otherwise back off one so that the last space
      // stays to prefix the next word. A lone space before a non-space falls to the plain \s+.
      if (run == n)
        end = run;
      else if (run - i >= 2)
        end = run - 1;
      else
        end = run;
    }
    pieces.push_back(text.substr(byte_at(i), byte_at(end) - byte_at(i)));
    i = end;
  }
  return pieces;
}

}  // namespace flashbox::gpt2
