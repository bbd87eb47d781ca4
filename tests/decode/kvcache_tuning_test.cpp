// The threshold of the chunked-prefill route (kPrefillRows, src/api/kvcache_prefill.hpp), moved
// through the private tuning interface (src/api/tuning.hpp) as benchmarks move it: 1 row sends a
// one-token decode to the prefill route, a million keeps a 256-row call on the decode kernels.
#include <gtest/gtest.h>

#include <string>

#include "api/tuning.hpp"
#include "decode/kvcache_case.hpp"

namespace flashbox::test {
namespace {

detail::TuningOverrides prefill_rows(int64_t rows) {
  detail::TuningOverrides o;
  o.kvcache_prefill_rows = rows;
  return o;
}

TEST(KvcacheTuning, PrefillRowsOverride) {
  {
    KvCase c;  // 1 token x 4 query heads per KV head = 4 rows per KV head: decode under the default
    c.seqlen_new = 1, c.causal = 1;
    KvData d(c);
    const detail::ScopedTuning tuning(prefill_rows(1));
    ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
    EXPECT_NE(std::string(flashbox_last_kernel()).find("(kvcache prefill)"), std::string::npos)
        << flashbox_last_kernel();
    d.check();
  }
  {
    KvCase c;
    c.causal = 1, c.seqlen_q = 64, c.seqlen_new = 64;  // 256 rows per KV head: prefill under the default
    KvData d(c);
    ASSERT_EQ(flashbox_attention_kvcache(&d.args), 0) << flashbox_last_error() << d.name();
    EXPECT_NE(std::string(flashbox_last_kernel()).find("(kvcache prefill)"), std::string::npos)
        << flashbox_last_kernel();
    d.check();
    KvData e(c);
    const detail::ScopedTuning tuning(prefill_rows(1 << 20));
    ASSERT_EQ(flashbox_attention_kvcache(&e.args), 0) << flashbox_last_error() << e.name();
    EXPECT_STREQ(flashbox_last_kernel(), "cpu_kvcache_rowwise");
    e.check();
  }
}

}  // namespace
}  // namespace flashbox::test
