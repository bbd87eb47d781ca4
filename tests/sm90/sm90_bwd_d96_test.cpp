// A training step at head dims 72, 80 and 96 on the Hopper head_dim 96 kernels: the forward
// (flash_fwd_sm90_d96.cu; its O and LSE feed the backward) and the backward (flash_bwd_sm90_d96.cu:
// 32-column 64B-swizzled panels, dQ as two 64-column chunks over a K padded to 128 columns; the TMA
// reads zeros past head_dim, the stores stop there). T = 1, 17, 63, 64, 65, 1000;
// seqlen_q != seqlen_k both ways; GQA and MQA; causal and not; bf16 and one fp16; both dQ modes;
// against the fp64 CPU reference backward (the shared check, sm90_bwd_case.hpp: NaN-poisoned
// gradients, guard bytes, relative error < 1e-2, seed printed). FLASHBOX_SM90_MODS_SMALL=1 keeps the
// small shapes (for compute-sanitizer). Skips without an sm90 GPU.
#include <vector>

#include "sm90/sm90_bwd_case.hpp"

namespace flashbox::test::sm90_bwd_d96 {
namespace {

using namespace sm90_bwd;

constexpr const char *kBwd = "cuda_flash_bwd_sm90_d96";
constexpr const char *kFwd = "cuda_flash_sm90_d96_";

const std::vector<BwdCase> kSmall = {
    {"T1 d96", 1, 1, 1, 2, 2, 96, 0},
    {"causal T17 GQA d80", 2, 17, 17, 4, 2, 80, 1},
    {"T63 MQA d72", 2, 63, 63, 4, 1, 72, 0},
    {"causal T64 d96", 1, 64, 64, 2, 2, 96, 1},
    {"T65 GQA d96", 2, 65, 65, 4, 2, 96, 0},
    {"causal 65x130 d72 (keys without rows)", 1, 65, 130, 2, 2, 72, 1},
    {"causal 130x17 d80 (rows without keys)", 1, 130, 17, 2, 1, 80, 1},
    {"fp16 causal T65 GQA d96", 1, 65, 65, 4, 2, 96, 1, -1, -1, 0.0f, Alibi::none, FLASHBOX_FLOAT16},
};

const std::vector<BwdCase> kLarge =
    concat(long_edges({.causal_gqa = 96, .plain = 80, .mqa = 96, .causal_short_keys = 72}),
           {{"causal T2049 GQA d96", 1, 2049, 2049, 2, 1, 96, 1}});

TEST(Sm90BwdD96, SmallCases) { run_cases(kSmall, Size::small, kBwd, "sm90", kFwd); }

TEST(Sm90BwdD96, LargeCases) { run_cases(kLarge, Size::large, kBwd, "sm90", kFwd); }

}  // namespace
}  // namespace flashbox::test::sm90_bwd_d96
