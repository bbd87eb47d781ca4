#include "gpt2/tokenizer/unicode_classes.hpp"

#include <algorithm>
#include <span>

namespace flashbox::gpt2 {
namespace {

struct CodePointRange {
  char32_t first, last;
};

#include "gpt2/tokenizer/unicode_class_table.inc"

bool in_ranges(std::span<const CodePointRange> ranges, char32_t cp) {
  // First range whose last code point is >= cp; cp belongs to it if it starts at or before cp.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), cp,
                             [](const CodePointRange &r, char32_t c) { return r.last < c; });
  return it != ranges.end() && it->first <= cp;
}

}  // namespace

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return in_ranges(kLetterRanges, cp);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(kNumberRanges, cp);
}

bool is_space(char32_t cp) { return in_ranges(kSpaceRanges, cp); }

}  // namespace flashbox::gpt2
