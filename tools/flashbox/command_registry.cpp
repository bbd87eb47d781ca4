#include "command_registry.hpp"

namespace flashbox::cli {

std::vector<CommandEntry> &command_registry() {
  static std::vector<CommandEntry> entries;  // function-local: safe from static-init order
  return entries;
}

bool register_command(int order, CommandSetup setup) {
  command_registry().push_back({order, setup});
  return true;
}

}  // namespace flashbox::cli
