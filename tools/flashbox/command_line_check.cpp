#include "command_line_check.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace flashbox::cli {
namespace {

size_t edit_distance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A negative number, or a comma list of numbers that starts with one ("-1,2,-3"): a value, not an option.
bool looks_like_number(const std::string &word) {
  if (word.size() < 2 || word[0] != '-') return false;
  size_t start = 0;
  while (start <= word.size()) {
    const size_t comma = std::min(word.find(',', start), word.size());
    const std::string piece = word.substr(start, comma - start);
    char *end = nullptr;
    std::strtod(piece.c_str(), &end);
    if (piece.empty() || !end || *end != '\0') return false;
    start = comma + 1;
  }
  return true;
}

const CLI::App *find_subcommand(const CLI::App &app, const std::string &word) {
  for (const CLI::App *sub : app.get_subcommands([](const CLI::App *) { return true; }))
    if (sub->check_name(word)) return sub;
  return nullptr;
}

std::vector<std::string> subcommand_names(const CLI::App &app) {
  std::vector<std::string> names;
  for (const CLI::App *sub : app.get_subcommands([](const CLI::App *) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

// `--name` and `-n` spellings of every option of `app` (its own only: subcommands do not fall through).
std::vector<std::string> option_names(const CLI::App &app) {
  std::vector<std::string> names;
  for (const CLI::Option *opt : app.get_options()) {
    for (const auto &l : opt->get_lnames()) names.push_back("--" + l);
    for (const auto &s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

const CLI::Option *find_option(const CLI::App &app, const std::string &name) {
  for (const CLI::Option *opt : app.get_options()) {
    for (const auto &l : opt->get_lnames())
      if (name == "--" + l) return opt;
    for (const auto &s : opt->get_snames())
      if (name == "-" + s) return opt;
  }
  return nullptr;
}

std::string suggestion(const std::string &word, const std::vector<std::string> &candidates) {
  const std::string best = closest_name(word, candidates);
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

}  // namespace

std::string closest_name(const std::string &word, const std::vector<std::string> &candidates) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const auto &c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::optional<std::string> unknown_word_error(const CLI::App &app, const std::string &program,
                                              const std::vector<std::string> &words) {
  const CLI::App *current = &app;
  std::string where = program;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string &word = words[i];
    if (word == "--") return std::nullopt;  // the rest are values; CLI11 judges them
    if (word.size() > 1 && word[0] == '-' && !looks_like_number(word)) {
      const size_t eq = word.find('=');
      const std::string name = word.substr(0, eq);
      const CLI::Option *opt = find_option(*current, name);
      if (!opt) {
        auto candidates = option_names(*current);
        return fmt::format("unknown option '{}' for '{}'{} (see {} --help)", name, where, suggestion(name, candidates),
                           where);
      }
      if (eq != std::string::npos) continue;  // --name=value: the value is in this word
      const int wanted = opt->get_items_expected_max();
      if (wanted <= 0) continue;  // a flag
      // A one-value option takes the next word whatever it is; a list takes words until the next
      // option or subcommand, as CLI11 does.
      if (wanted == 1) {
        ++i;
        continue;
      }
      while (i + 1 < words.size()) {
        const std::string &next = words[i + 1];
        if (next == "--" || (next.size() > 1 && next[0] == '-' && !looks_like_number(next))) break;
        if (find_subcommand(*current, next)) break;
        ++i;
      }
      continue;
    }
    if (const CLI::App *sub = find_subcommand(*current, word)) {
      current = sub;
      where += " " + sub->get_name();
      continue;
    }
    const auto names = subcommand_names(*current);
    if (!names.empty())
      return fmt::format("unknown subcommand '{}' for '{}'{} (subcommands: {})", word, where, suggestion(word, names),
                         fmt::join(names, ", "));
    return fmt::format("unexpected word '{}' for '{}': it takes options only (see {} --help)", word, where, where);
  }
  return std::nullopt;
}

}  // namespace flashbox::cli
