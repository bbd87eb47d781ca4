// The Hopper backward's head_dim 192 kernel (flash_bwd_sm90_kernel.cuh, "Head dimension 192":
// consumer 0 owns dV, consumer 1 dK, a three-deep Q/dO ring) and the head dims it serves (multiples
// of 8 in 136..192: zeros past head_dim on the loads, no store past it): d 136, 160, 176, 192; T = 1,
// 17, 65, 1000; causal and not; GQA and MQA; seqlen_q != seqlen_k (rows without keys, keys without
// rows); windows, softcap and ALiBi (per head and per batch); bf16 and fp16; against the fp64 CPU
// reference backward (the shared check, sm90_bwd_case.hpp: NaN-poisoned gradients, guard bytes,
// relative error < 1e-2, seed printed). The atomic-dQ run must name cuda_flash_bwd_sm90_d192;
// deterministic mode above 128 is the sm80 family's (the d192 kernel's dQ adds are unordered), checked
// for its bits and its name. FLASHBOX_SM90_MODS_SMALL=1 keeps the small shapes (for
// compute-sanitizer). Skips without an sm90 GPU.
#include <vector>

#include "sm90/sm90_bwd_case.hpp"

namespace flashbox::test::sm90_bwd_d192 {
namespace {

using namespace sm90_bwd;

constexpr const char *kD192 = "cuda_flash_bwd_sm90_d192";
constexpr const char *kSm80Det = "cuda_flash_bwd_sm80_d256_deterministic";

const std::vector<BwdCase> kSmall =
    concat(small_edges({.t1 = 192,
                        .causal_t17_gqa = 192,
                        .mqa = 160,
                        .keys_without_rows = 136,
                        .rows_without_keys = 176,
                        .fp16_gqa = 192,
                        .mods = 192}),
           {{"causal alibi/batch 65x130 d136", 2, 65, 130, 2, 1, 136, 1, -1, -1, 0.0f, Alibi::batch}});

const std::vector<BwdCase> kLarge =
    concat(long_edges({.causal_gqa = 192, .plain = 192, .mqa = 176, .causal_short_keys = 136}),
           {
               {"causal window(100,0) softcap 30 T1000 d160", 1, 1000, 1000, 2, 1, 160, 1, 100, -1, 30.0f},
               {"window(64,32) alibi/head T1000 d192", 1, 1000, 1000, 2, 2, 192, 0, 64, 32, 0.0f, Alibi::head},
               {"fp16 causal T1000 GQA d192", 1, 1000, 1000, 4, 2, 192, 1, -1, -1, 0.0f, Alibi::none, FLASHBOX_FLOAT16},
           });

TEST(Sm90BwdD192, SmallCases) { run_cases(kSmall, Size::small, kD192, kSm80Det); }

TEST(Sm90BwdD192, LargeCases) { run_cases(kLarge, Size::large, kD192, kSm80Det); }

}  // namespace
}  // namespace flashbox::test::sm90_bwd_d192
