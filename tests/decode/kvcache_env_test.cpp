// FLASHBOX_KVCACHE_PREFILL_ROWS, the threshold of the chunked-prefill route (src/api/kvcache_prefill.hpp):
// the library reads the environment once per process, so these cases run only in the ctest entries
// that set the variable before the process starts (tests/decode/CMakeLists.txt, decode_env_*); the
// discovered instance without it skips with that reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "decode/kvcache_case.hpp"

namespace flashbox::test {
namespace {

TEST(KvcacheEnv, PrefillRowsOverride) {
  const char *v = std::getenv("FLASHBOX_KVCACHE_PREFILL_ROWS");
  if (v == nullptr) GTEST_SKIP() << "needs FLASHBOX_KVCACHE_PREFILL_ROWS set (ctest's decode_env_* entries set it)";
  KvCase c;  // 1 token x 4 query heads per KV head = 4 rows per KV head: decode under the default
  c.seqlen_new = 1, c.causal = 1;
  if (std::strcmp(v, "1") == 0) {
    KvData d(c);
    ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
    EXPECT_NE(std::string(flashbox_last_kernel()).find("(kvcache prefill)"), std::string::npos) << flashbox_last_kernel();
    d.check();
  } else if (std::strcmp(v, "1048576") == 0) {
    c.seqlen_q = 64, c.seqlen_new = 64;  // 256 rows per KV head: prefill under the default, not under this
    KvData d(c);
    ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
    EXPECT_STREQ(flashbox_last_kernel(), "cpu_kvcache_rowwise");
    d.check();
  } else {
    KvData d(c);
    const auto o0 = d.o, k0 = d.k_cache, v0 = d.v_cache;
    EXPECT_EQ(flashbox_attention_kvcache(&d.args), FLASHBOX_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(flashbox_last_error()).find("FLASHBOX_KVCACHE_PREFILL_ROWS = '"), std::string::npos)
        << flashbox_last_error();
    EXPECT_TRUE(d.o == o0 && d.k_cache == k0 && d.v_cache == v0) << "a refused call wrote o or the cache";
  }
}

}  // namespace
}  // namespace flashbox::test
