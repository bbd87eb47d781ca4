// The sm90 backward's A/B switches (FLASHBOX_SM90_BWD_*) are read where they are used, some at every
// call; src/api/options.cpp checks their values once per process with the other overrides, so that a
// value the reader would not recognise fails the calls with a message naming it instead of silently
// running the default. One process per value: ctest's api_env_* entries set FLASHBOX_TEST_ENV_SWITCH
// to the variable's name, the variable itself, and FLASHBOX_TEST_ENV_GOOD for a value that is valid.
// A CPU forward is enough: the check comes before the device is chosen.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "support/attention_case.hpp"

using flashbox::test::AttentionCase;
using flashbox::test::AttentionData;

TEST(EnvSwitches, BackwardSwitchValues) {
  const char *name = std::getenv("FLASHBOX_TEST_ENV_SWITCH");
  if (name == nullptr) GTEST_SKIP() << "needs FLASHBOX_TEST_ENV_SWITCH set (ctest's api_env_* entries set it)";
  const char *value = std::getenv(name);
  ASSERT_NE(value, nullptr) << name << " is not set";
  AttentionCase c;
  c.seqlen_q = 17, c.seqlen_k = 33, c.causal = 1;
  AttentionData d(c);
  const std::vector<uint8_t> o_before = d.o_bytes();
  const int rc = flashbox_attention_forward(&d.args);
  if (std::getenv("FLASHBOX_TEST_ENV_GOOD") != nullptr) {
    EXPECT_EQ(rc, FLASHBOX_OK) << flashbox_last_error();
    return;
  }
  EXPECT_EQ(rc, FLASHBOX_ERR_INVALID_ARGUMENT);
  const std::string want = std::string(name) + " = '" + value + "'";
  EXPECT_NE(std::string(flashbox_last_error()).find(want), std::string::npos) << flashbox_last_error();
  EXPECT_EQ(d.o_bytes(), o_before) << "a refused call wrote o";
}
