// Bad command lines end with a non-zero status and a message that names the problem.
#include "support/cli_runner.hpp"

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

// Unknown words are named at every level, with the closest valid name, before anything runs; --help
// after an unknown word is an error too, not the help of the last known subcommand.
TEST(CliBadOptions, UnknownWordsAreNamedWithTheClosestValidName) {
  const BadCase cases[] = {
      {"repor", "unknown subcommand 'repor' for 'flashbox' (did you mean 'report'?)"},
      {"gpt2 evl", "unknown subcommand 'evl' for 'flashbox gpt2' (did you mean 'eval'?)"},
      {"gpt2 trian", "unknown subcommand 'trian' for 'flashbox gpt2' (did you mean 'train'?)"},
      {"gpt2 trian --help", "unknown subcommand 'trian' for 'flashbox gpt2'"},
      {"gpt2 eval --wieghts m.safetensors",
       "unknown option '--wieghts' for 'flashbox gpt2 eval' (did you mean '--weights'?)"},
      {"report --jsn /tmp/x.json", "unknown option '--jsn' for 'flashbox report' (did you mean '--json'?)"},
      {"report --jsn=/tmp/x.json", "unknown option '--jsn' for 'flashbox report'"},
      {"bench --device cpu extra", "unexpected word 'extra' for 'flashbox bench'"},
      {"memory --seqlen 512 1024 --dtyp bf16", "did you mean '--dtype'?"},
      {"--verison", "unknown option '--verison' for 'flashbox' (did you mean '--version'?)"},
  };
  for (const auto &c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << " printed: " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << " printed: " << r.err;
    EXPECT_EQ(r.out.find("Usage"), std::string::npos) << c.args << ": printed a help text";
  }
}

TEST(CliBadOptions, KnownWordsStillParse) {
  // Negative numbers are values, list options take several words, --help of a nested subcommand works.
  EXPECT_EQ(run_cli("softmax-trace --values -1,2,-3,4 --block 2").exit_code, 0);
  EXPECT_EQ(run_cli("memory --seqlen 512 1024").exit_code, 0);
  const auto help = run_cli("gpt2 eval --help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--weights"), std::string::npos) << help.out;
}

TEST(CliBadOptions, LibraryExceptionsBecomeOneCleanLine) {
  // inf passes the parser but not the trace's own validation: a clean "flashbox: error:" line.
  const auto r = run_cli("softmax-trace --values 1,inf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("flashbox: error:"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flashbox::test
