// The `flashbox` command: every subcommand registers itself (command_registry.hpp); main adds them in
// their declared order, parses, and turns failures into one clean line and a non-zero exit status.
#include "command_line_check.hpp"
#include "command_registry.hpp"
#include "flashbox/flashbox.h"

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  CLI::App app{
      "flashbox: attention three ways (naive, online-softmax blocked, tensor-core flash), "
      "measured side by side",
      "flashbox"};
  app.set_version_flag("--version", std::string(flashbox_version()));
  app.require_subcommand(1);
  app.fallthrough(false);

  auto entries = flashbox::cli::command_registry();
  std::stable_sort(entries.begin(), entries.end(), [](const auto &a, const auto &b) { return a.order < b.order; });
  for (const auto &entry : entries) entry.setup(app);

  // CLI11 would report a mistyped (nested) subcommand as "a subcommand is required", an unknown option
  // as "not expected", and answer --help after an unknown word; name the word instead.
  if (const auto error =
          flashbox::cli::unknown_word_error(app, "flashbox", std::vector<std::string>(argv + 1, argv + argc))) {
    fmt::print(stderr, "flashbox: {}\n", *error);
    return 2;
  }

  try {
    app.parse(argc, argv);  // subcommands run in their callbacks, inside parse
  } catch (const CLI::ParseError &e) {
    // --help, --version, bad options, and CLI::RuntimeError(code) from a command whose result failed.
    return app.exit(e);
  } catch (const std::exception &e) {
    std::fflush(stdout);
    fmt::print(stderr, "flashbox: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
