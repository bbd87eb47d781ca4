// Tuning is not API: flashbox_options says what to compute (family, sm_margin); tiles, schedules and
// thresholds are the tile policies', reachable only through the private tuning interface
// (src/api/tuning.hpp), whose parser and scope are checked here; and the library reads no
// environment variable outside the documented exceptions (README, "Environment").
#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "api/tuning.hpp"
#include "support/attention_case.hpp"

namespace flashbox::test {
namespace {

TEST(Tuning, SetParsesEveryKeyAndRefusesBadValues) {
  const detail::ScopedTuning restore(detail::TuningOverrides{});  // whatever this test sets ends with it
  struct Case {
    const char *key, *value;
    bool good;
  };
  for (const Case c :
       {Case{"forward_family", "sm80", true}, Case{"forward_family", "sm70", false},
        Case{"backward_family", "sm90", true}, Case{"sm90_tile", "128x176", true}, Case{"sm90_tile", "128", false},
        Case{"sm90_tile", "128x176x2", false}, Case{"sm90_tile", "0x64", false}, Case{"sm90_schedule", "grid", true},
        Case{"sm90_schedule", "persistent", true}, Case{"sm90_schedule", "ring", false},
        Case{"sm90_max_ctas", "3", true}, Case{"sm90_max_ctas", "0", false}, Case{"sm90_l2_section_mb", "0", true},
        Case{"sm90_l2_section_mb", "-1", false}, Case{"sm80_bwd_block_q", "64", true},
        Case{"sm80_bwd_block_q", "48", false}, Case{"kvcache_prefill_rows", "1", true},
        Case{"kvcache_prefill_rows", "x12", false}, Case{"sm90_tiles", "128x128", false}}) {
    const detail::TuningOverrides before = detail::tuning_overrides();
    const int rc = detail::set_tuning(c.key, c.value);
    if (c.good) {
      EXPECT_EQ(rc, FLASHBOX_OK) << c.key << "=" << c.value << ": " << flashbox_last_error();
    } else {
      EXPECT_EQ(rc, FLASHBOX_ERR_INVALID_ARGUMENT) << c.key << "=" << c.value;
      EXPECT_NE(std::string(flashbox_last_error()).find(c.key), std::string::npos) << flashbox_last_error();
      EXPECT_TRUE(detail::tuning_overrides() == before) << "a refused value changed the overrides";
    }
  }
  const detail::TuningOverrides o = detail::tuning_overrides();
  EXPECT_EQ(o.forward_family, FLASHBOX_FAMILY_SM80);
  EXPECT_EQ(o.backward_family, FLASHBOX_FAMILY_SM90);
  EXPECT_EQ(o.sm90_tile_m, 128);
  EXPECT_EQ(o.sm90_tile_n, 176);
  EXPECT_EQ(o.sm90_schedule, detail::Sm90Schedule::persistent);
  EXPECT_EQ(o.sm90_max_ctas, 3);
  EXPECT_EQ(o.sm90_l2_section_mb, 0);
  EXPECT_EQ(o.sm80_bwd_block_q, 64);
  EXPECT_EQ(o.kvcache_prefill_rows, 1);
  for (const char *key : {"forward_family", "backward_family", "sm90_tile", "sm90_schedule", "sm90_max_ctas",
                          "sm90_l2_section_mb", "sm80_bwd_block_q", "kvcache_prefill_rows"})
    EXPECT_EQ(detail::set_tuning(key, nullptr), FLASHBOX_OK) << key;
  EXPECT_TRUE(detail::tuning_overrides() == detail::TuningOverrides{}) << "an empty value is the policy's choice";
}

TEST(Tuning, ScopeRestoresThePreviousSet) {
  ASSERT_TRUE(detail::tuning_overrides() == detail::TuningOverrides{});
  {
    detail::TuningOverrides o;
    o.sm80_bwd_block_q = 64;
    const detail::ScopedTuning scoped(o);
    EXPECT_EQ(detail::tuning_overrides().sm80_bwd_block_q, 64);
  }
  EXPECT_TRUE(detail::tuning_overrides() == detail::TuningOverrides{});
}

// sm_margin is checked at the edge: negative is refused on every device (the upper bound, the
// device's SM count, where a CUDA call knows its device); a struct of an older layout (struct_size
// outside [offsetof(sm_margin), sizeof]) is refused, naming struct_size.
TEST(Tuning, OptionsSmMarginAndStructSize) {
  AttentionCase c;
  c.seqlen_q = 17, c.seqlen_k = 33, c.causal = 1;
  AttentionData d(c);
  flashbox_options o;
  flashbox_options_init(&o);
  EXPECT_EQ(o.sm_margin, 0);
  o.sm_margin = 2;
  EXPECT_EQ(flashbox_attention_forward_opts(&d.args, &o), FLASHBOX_OK) << flashbox_last_error();
  o.sm_margin = -1;
  EXPECT_EQ(flashbox_attention_forward_opts(&d.args, &o), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("options.sm_margin = -1"), std::string::npos)
      << flashbox_last_error();
  flashbox_options_init(&o);
  o.struct_size = int32_t(offsetof(flashbox_options, sm_margin));  // a caller without the field: margin 0
  EXPECT_EQ(flashbox_attention_forward_opts(&d.args, &o), FLASHBOX_OK) << flashbox_last_error();
  o.struct_size = 32;  // the layout before sm_margin, with the tile fields
  EXPECT_EQ(flashbox_attention_forward_opts(&d.args, &o), FLASHBOX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashbox_last_error()).find("options.struct_size = 32"), std::string::npos)
      << flashbox_last_error();
}

// No getenv in src/ or include/ but the documented exceptions (README, "Environment"): what locates
// things, never what changes a result or a kernel choice. Every call must name its variable as a
// literal so that this list can be checked.
TEST(SourceRules, NoEnvironmentReadsButTheDocumentedOnes) {
  const std::set<std::string> allowed = {
      "PATH",             // src/report/child_process.cpp: finding the programs the report runs
      "FLASHBOX_PYTHON",  // src/report/step_peers.cpp: the Python of the report's peer step
      "XDG_CACHE_HOME",   // src/api/options.cpp: where compiled mods are cached (mod_cache_dir)
      "HOME",             // src/api/options.cpp: the cache's fallback, ~/.cache/flashbox/mods
  };
  const std::regex call(R"re(getenv\s*\(\s*("([A-Za-z0-9_]*)")?)re");
  std::vector<std::string> found;
  for (const char *dir : {"src", "include"})
    for (const auto &entry :
         std::filesystem::recursive_directory_iterator(std::string(FLASHBOX_SOURCE_DIR) + "/" + dir)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".h" && ext != ".cu" && ext != ".cuh" && ext != ".c") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      for (std::sregex_iterator m(s.begin(), s.end(), call), end; m != end; ++m) {
        const std::string name = (*m)[2].matched ? (*m)[2].str() : "(not a literal)";
        if (!allowed.count(name))
          found.push_back(std::filesystem::relative(entry.path(), FLASHBOX_SOURCE_DIR).string() + ": " + name);
      }
    }
  std::string list;
  for (const std::string &f : found) list += "\n  " + f;
  EXPECT_TRUE(found.empty()) << "getenv outside the documented exceptions:" << list;
}

}  // namespace
}  // namespace flashbox::test
