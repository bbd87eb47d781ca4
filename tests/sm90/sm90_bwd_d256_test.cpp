// The Hopper backward's head_dim 256 kernel (flash_bwd_sm90_kernel.cuh, "Head dimension 256") and
// the head dims it serves (multiples of 8 in 200..256: zeros past head_dim on the loads, no store
// past it; 136..192 are the d192 kernel's, sm90_bwd_d192_test.cpp): d 200, 224, 248, 256; T = 1,
// 17, 65, 1000; causal and not; GQA and MQA; seqlen_q !=
// seqlen_k (rows without keys, keys without rows); a window, softcap and ALiBi case; bf16 and one
// fp16; against the fp64 CPU reference backward (the shared check, sm90_bwd_case.hpp: NaN-poisoned
// gradients, guard bytes, relative error < 1e-2, seed printed). The atomic-dQ run must name
// cuda_flash_bwd_sm90_d256; deterministic mode above 128 is the sm80 family's (the d256 kernel's
// dQ adds are unordered), checked for its bits and its name. FLASHBOX_SM90_MODS_SMALL=1 keeps the
// small shapes (for compute-sanitizer). Skips without an sm90 GPU.
#include <vector>

#include "sm90/sm90_bwd_case.hpp"

namespace flashbox::test::sm90_bwd_d256 {
namespace {

using namespace sm90_bwd;

constexpr const char *kD256 = "cuda_flash_bwd_sm90_d256";
constexpr const char *kSm80Det = "cuda_flash_bwd_sm80_d256_deterministic";

const std::vector<BwdCase> kSmall = small_edges({.t1 = 256,
                                                 .causal_t17_gqa = 256,
                                                 .mqa = 224,
                                                 .keys_without_rows = 200,
                                                 .rows_without_keys = 248,
                                                 .fp16_gqa = 256,
                                                 .mods = 256});

const std::vector<BwdCase> kLarge =
    concat(long_edges({.causal_gqa = 256, .plain = 256, .mqa = 224, .causal_short_keys = 200}),
           {{"causal window(100,0) softcap 30 T1000 d224", 1, 1000, 1000, 2, 1, 224, 1, 100, -1, 30.0f}});

TEST(Sm90BwdD256, SmallCases) { run_cases(kSmall, Size::small, kD256, kSm80Det); }

TEST(Sm90BwdD256, LargeCases) { run_cases(kLarge, Size::large, kD256, kSm80Det); }

}  // namespace
}  // namespace flashbox::test::sm90_bwd_d256
