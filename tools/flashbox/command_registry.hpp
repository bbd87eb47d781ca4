// Subcommands register themselves: each tools/flashbox/cmd_<name>.cpp defines a setup function and
// writes FLASHBOX_COMMAND(order, setup) once; main.cpp adds them to the parser in `order`.
// Each file's own names live in namespace cmd_<name> (not an anonymous one): the unity build of
// tools/flashbox/CMakeLists.txt compiles several of these files as one translation unit.
#pragma once
#include <CLI/CLI.hpp>

#include <vector>

namespace flashbox::cli {

using CommandSetup = void (*)(CLI::App &app);

struct CommandEntry {
  int order;
  CommandSetup setup;
};

std::vector<CommandEntry> &command_registry();
bool register_command(int order, CommandSetup setup);

}  // namespace flashbox::cli

#define FLASHBOX_CONCAT_INNER(a, b) a##b
#define FLASHBOX_CONCAT(a, b) FLASHBOX_CONCAT_INNER(a, b)
#define FLASHBOX_COMMAND(order, setup) \
  static const bool FLASHBOX_CONCAT(flashbox_command_registered_, __LINE__) = \
      ::flashbox::cli::register_command(order, setup)
