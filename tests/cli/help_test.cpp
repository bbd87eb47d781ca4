// Every subcommand the binary lists answers --help; the main program needs a subcommand.
#include "flashbox/flashbox.h"
#include "support/cli_runner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <vector>

namespace flashbox::test {
namespace {

std::vector<std::string> listed_subcommands(const std::string &help) {
  std::vector<std::string> names;
  std::istringstream in(help);
  std::string line;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (line.rfind("Subcommands:", 0) == 0) {
      in_section = true;
      continue;
    }
    if (!in_section || line.empty()) continue;
    std::istringstream words(line);
    std::string name;
    if (words >> name) names.push_back(name);
  }
  return names;
}

TEST(CliHelp, MainHelpListsTheSubcommandsOfThisIssue) {
  const auto r = run_cli("--help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto names = listed_subcommands(r.out);
  for (const char *expected : {"memory", "softmax-trace", "check", "bench", "report"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected << " missing in\n" << r.out;
}

TEST(CliHelp, EverySubcommandAnswersHelp) {
  const auto names = listed_subcommands(run_cli("--help").out);
  ASSERT_GE(names.size(), 5u);
  for (const auto &name : names) {
    const auto r = run_cli(name + " --help");
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << name << " --help printed:\n" << r.out;
    EXPECT_NE(r.out.find("--help"), std::string::npos) << name;
  }
}

TEST(CliHelp, VersionIsTheLibraryVersion) {
  const auto r = run_cli("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find(flashbox_version()), std::string::npos) << r.out;
}

TEST(CliHelp, NoSubcommandIsAnError) {
  const auto r = run_cli("");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("subcommand"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flashbox::test
