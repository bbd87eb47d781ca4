// Names what is wrong with a command line before CLI11 parses it. CLI11 reports a mistyped nested
// subcommand as "A subcommand is required", an unknown option as "arguments were not expected", and
// runs `--help` of the last known subcommand even when an unknown word came before it. This walks
// the words the way the parser will (subcommands, options and the values they take) and stops at the
// first word that is neither, with the closest valid name.
#pragma once
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace flashbox::cli {

// The candidate with the smallest edit distance to `word` (ties: the first); empty when none.
std::string closest_name(const std::string &word, const std::vector<std::string> &candidates);

// The message for the first unknown subcommand, option or stray word in argv[1..argc), or nothing
// when every word is one the parser knows. `program` names the top-level app in messages.
std::optional<std::string> unknown_word_error(const CLI::App &app, const std::string &program,
                                              const std::vector<std::string> &words);

}  // namespace flashbox::cli
