// The Hopper backward at the head dims that run on a wider instantiation with zero columns
// (bwd_route.hpp; branch paddims): multiples of 8 in 8..24 on the d32 kernel (branch d32bwd; 32 is
// its own width), 40..56 on the d64 one, 104..120 on the d128 one; the TMA reads zeros past head_dim,
// the dK/dV stores and the dQ convert write only head_dim columns. Head dims 8, 16, 24, 32, 40, 56,
// 104, 112, 120; T = 1, 17, 65, 1000; causal and not; GQA and MQA; seqlen_q != seqlen_k (rows without
// keys, keys without rows); bf16 and fp16; against the fp64 CPU reference backward (the shared check,
// sm90_bwd_case.hpp: NaN-poisoned gradients framed by guard bytes, which also catch a column written
// past head_dim, relative error < 1e-2, seed printed). The atomic-dQ run must name the instantiation
// (cuda_flash_bwd_sm90_d32, _d64 or _d128), the two deterministic runs theirs (plan_kernel_d: bf16
// GQA at 8..32 stays on d64, in v10's order, "_qdesc", as bf16 GQA at d64 and bf16 at d128; the d32
// kernel runs v9's order, no "_qdesc") and must repeat bitwise. The variable-length path at these
// head dims (its dQ convert reads rows of the instantiation's width) is in sm90_bwd_varlen_test.cpp,
// PaddedHeadDims. FLASHBOX_SM90_MODS_SMALL=1 keeps the small shapes (for compute-sanitizer). Skips
// without an sm90 GPU.
#include <string>
#include <vector>

#include "cuda/backward/sm90/bwd_route.hpp"
#include "sm90/sm90_bwd_case.hpp"

namespace flashbox::test::sm90_bwd_pad_dims {
namespace {

using namespace sm90_bwd;

const std::vector<BwdCase> kSmall =
    concat(small_edges({.t1 = 8,
                        .causal_t17_gqa = 32,
                        .mqa = 40,
                        .keys_without_rows = 56,
                        .rows_without_keys = 112,
                        .fp16_gqa = 40,
                        .mods = 32}),
           {
               {"T1 causal d120", 1, 1, 1, 2, 1, 120, 1},
               {"T17 d104", 1, 17, 17, 2, 2, 104, 0},
               {"fp16 causal 65x200 d120", 1, 65, 200, 2, 2, 120, 1, -1, -1, 0.0f, Alibi::none, FLASHBOX_FLOAT16},
               {"causal T65 GQA d8", 1, 65, 65, 4, 1, 8, 1},
               // The d32 kernel (branch d32bwd): 8..32, its deterministic mode in v9's order (MHA, fp16).
               {"T1 causal d32", 1, 1, 1, 2, 2, 32, 1},
               {"T17 d16", 2, 17, 17, 2, 2, 16, 0},
               {"causal T65 d24", 1, 65, 65, 2, 2, 24, 1},
               {"T65 MQA d32", 1, 65, 65, 4, 1, 32, 0},
               {"causal 64x130 d32 (keys without rows)", 1, 64, 130, 2, 2, 32, 1},
               {"causal 130x17 d16 (rows without keys)", 1, 130, 17, 2, 1, 16, 1},
               {"200x65 d24", 1, 200, 65, 2, 2, 24, 0},
               {"fp16 causal T65 GQA d32", 1, 65, 65, 4, 2, 32, 1, -1, -1, 0.0f, Alibi::none, FLASHBOX_FLOAT16},
               {"fp16 T17 d8", 1, 17, 17, 2, 2, 8, 0, -1, -1, 0.0f, Alibi::none, FLASHBOX_FLOAT16},
               {"softcap 5 alibi/batch 65x130 GQA d16", 2, 65, 130, 4, 2, 16, 0, -1, -1, 5.0f, Alibi::batch},
           });

const std::vector<BwdCase> kLarge =
    concat(long_edges({.causal_gqa = 32, .plain = 40, .mqa = 56, .causal_short_keys = 104}),
           {
               {"causal T1000 GQA d112", 1, 1000, 1000, 4, 2, 112, 1},
               {"T1000 d120", 1, 1000, 1000, 2, 2, 120, 0},
               {"fp16 causal T1000 GQA d32", 1, 1000, 1000, 4, 2, 32, 1, -1, -1, 0.0f, Alibi::none, FLASHBOX_FLOAT16},
               {"fp16 T1000 d112", 1, 1000, 1000, 2, 1, 112, 0, -1, -1, 0.0f, Alibi::none, FLASHBOX_FLOAT16},
               {"causal T1000 d8", 1, 1000, 1000, 2, 2, 8, 1},
               {"causal T1000 d32", 2, 1000, 1000, 2, 2, 32, 1},
               {"T1000 MQA d24", 1, 1000, 1000, 4, 1, 24, 0},
               {"causal 1000x300 d16", 1, 1000, 300, 2, 2, 16, 1},
               {"300x1000 d32", 1, 300, 1000, 2, 2, 32, 0},
               {"fp16 T1000 d32", 1, 1000, 1000, 2, 2, 32, 0, -1, -1, 0.0f, Alibi::none, FLASHBOX_FLOAT16},
           });

// The names the runs must carry: the atomic one kernel_head_dim's instantiation, the deterministic
// one plan_kernel_d's (a "_d32" kernel is never "_qdesc": launch_bwd_qdesc has d64 and d128 only).
void run_padded(const BwdCase &c, Worst &worst) {
  using namespace sm90::bwd;
  const std::string kernel = "cuda_flash_bwd_sm90_d" + std::to_string(kernel_head_dim(c.head_dim));
  const int det_kd = plan_kernel_d(c.head_dim, true, c.dtype == FLASHBOX_BFLOAT16, false, c.heads_q / c.heads_kv);
  const std::string det = "cuda_flash_bwd_sm90_d" + std::to_string(det_kd);
  run_case(c, worst, kernel.c_str(), det.c_str());
}

TEST(Sm90BwdPadDims, Route) {
  using namespace sm90::bwd;
  for (int64_t d : {8, 16, 24, 32}) {
    EXPECT_EQ(kernel_head_dim(d), 32) << d;
    EXPECT_EQ(plan_kernel_d(d, true, true, false, 1), 32) << d;   // deterministic MHA: d32, v9's order
    EXPECT_EQ(plan_kernel_d(d, true, false, false, 4), 32) << d;  // fp16 GQA: v9's order at d64 too
    EXPECT_EQ(plan_kernel_d(d, true, true, true, 4), 32) << d;    // varlen: v9's order at d64 too
    EXPECT_EQ(plan_kernel_d(d, true, true, false, 4), 64) << d;   // bf16 GQA: d64's v10 order
    EXPECT_EQ(plan_kernel_d(d, false, true, false, 4), 32) << d;
  }
  for (int64_t d : {40, 48, 56}) EXPECT_EQ(kernel_head_dim(d), 64) << d;
  for (int64_t d : {104, 112, 120}) EXPECT_EQ(kernel_head_dim(d), 128) << d;
  EXPECT_EQ(accum_d_for(32), 64);
}

TEST(Sm90BwdPadDims, SmallCases) { run_cases(kSmall, Size::small, run_padded); }

TEST(Sm90BwdPadDims, LargeCases) { run_cases(kLarge, Size::large, run_padded); }

}  // namespace
}  // namespace flashbox::test::sm90_bwd_pad_dims
