// Bad command lines end with a non-zero status and a message that names the problem.
#include "cli/cli_runner.hpp"

#include <gtest/gtest.h>

namespace flashbox::test {
namespace {

struct BadCase {
  const char *args;
  const char *message;  // a piece of the expected stderr
};

TEST(CliBadOptions, EachGivesNonZeroExitAndAMessage) {
  const BadCase cases[] = {
      {"frobnicate", "frobnicate"},
      {"memory --dtype fp8", "fp8"},
      {"memory --seqlen 0", "seqlen"},
      {"memory --seqlen abc", "abc"},
      {"check --batch 0", "batch"},
      {"check --dtype int8", "int8"},
      {"check --unknown-flag", "unknown-flag"},
      {"bench --impls naive,turbo --device cpu", "turbo"},
      {"bench --device tpu", "tpu"},
      {"bench --repeats 0 --device cpu", "repeats"},
      {"softmax-trace --block 0", "block"},
      {"softmax-trace --values 1,x", "x"},
      {"report", "--json"},
      {"report --json /tmp/flashbox_cli_unused.json --steps nope", "nope"},
      {"report --json /tmp/x.json --merge /nonexistent/peers.json", "nonexistent"},
  };
  for (const auto &c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << " printed: " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << c.args << ": " << r.err;
  }
}

TEST(CliBadOptions, LibraryExceptionsBecomeOneCleanLine) {
  // inf passes the parser but not the trace's own validation: a clean "flashbox: error:" line.
  const auto r = run_cli("softmax-trace --values 1,inf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("flashbox: error:"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flashbox::test
