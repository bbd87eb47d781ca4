#include "text_table.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <stdexcept>

namespace flashbox::cli {
namespace {

bool looks_numeric(const std::string &s) {
  if (s.empty()) return false;
  const unsigned char c = static_cast<unsigned char>(s[0]);
  return std::isdigit(c) || ((c == '-' || c == '+' || c == '.') && s.size() > 1);
}

}  // namespace

TextTable::TextTable(std::vector<std::string> header) : header_(std::move(header)) {}

void TextTable::add_row(std::vector<std::string> cells) {
  if (cells.size() != header_.size())
    throw std::logic_error(fmt::format("table row has {} cells, header has {}", cells.size(), header_.size()));
  rows_.push_back(std::move(cells));
}

std::string TextTable::render() const {
  std::vector<size_t> width(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) {
    width[c] = header_[c].size();
    for (const auto &row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string> &cells, bool is_header) {
    std::string out;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c) out += "  ";
      const bool right = !is_header && looks_numeric(cells[c]);
      out += right ? fmt::format("{:>{}}", cells[c], width[c]) : fmt::format("{:<{}}", cells[c], width[c]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header_, true);
  size_t total = 0;
  for (size_t w : width) total += w;
  out += std::string(total + 2 * (width.empty() ? 0 : width.size() - 1), '-') + "\n";
  for (const auto &row : rows_) out += line(row, false);
  return out;
}

std::string format_bytes(int64_t bytes) {
  static constexpr std::array<const char *, 5> units = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (std::fabs(v) >= 1024.0 && u + 1 < units.size()) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", v, units[u]);
}

std::string format_sci(double value) { return fmt::format("{:.2e}", value); }

}  // namespace flashbox::cli
