// The Hopper backward with the extension's masks and score transforms (flashbox_attention_backward_ext:
// sliding window, softcap, ALiBi per head and per batch x head), head_dim 64 and 128, causal and not,
// odd T (1, 17, 65, 1000, 4097), seqlen_q != seqlen_k (rows without keys, keys without rows), GQA and
// MQA, bf16 and fp16, softcap alone, ALiBi alone and both (each of the kernel's transformed paths:
// ALiBi alone and softcap at d128 overlapped with dP's product, softcap at d64 fused), both dQ modes,
// against the fp64 CPU reference backward (src/cpu/reference_backward_fp64.hpp) with the same
// core::ScoreMods, on random inputs (seed printed; FLASHBOX_TEST_SEED=N repeats one). The backward
// runs on the GPU forward's own O and LSE (what a training step does). Gradients are poisoned (NaN)
// and framed by guard bytes that must survive; the deterministic mode must repeat bitwise; and the
// kernel that ran must be the sm90 backward (auto picks it on compute capability 9.0 unless
// FLASHBOX_BWD_ARCH=sm80). FLASHBOX_SM90_MODS_SMALL=1 keeps only the small shapes (for
// compute-sanitizer). Skips without an sm90 GPU. The check itself: sm90_bwd_case.hpp.
#include <vector>

#include "sm90/sm90_bwd_case.hpp"

namespace flashbox::test::sm90_bwd_mods {
namespace {

using namespace sm90_bwd;

// Small shapes (compute-sanitizer memcheck runs these).
const std::vector<BwdCase> kSmall = {
    {"causal window(16,0) T17 GQA d64", 2, 17, 17, 4, 2, 64, 1, 16},
    {"window(16,8) 63x65 MQA d128", 2, 63, 65, 4, 1, 128, 0, 16, 8},
    {"softcap 5 T65 d64", 2, 65, 65, 2, 2, 64, 0, -1, -1, 5.0f},
    {"causal softcap 2 alibi/head 65x64 GQA d128", 2, 65, 64, 4, 2, 128, 1, -1, -1, 2.0f, Alibi::head},
    {"alibi/batch window(5,-1) T1x63 d64", 2, 1, 63, 2, 1, 64, 0, 5, -1, 0.0f, Alibi::batch},
    {"window(0,0) 65x65 d128", 1, 65, 65, 2, 2, 128, 0, 0, 0},
    {"window(-1,3) 64x17 d64", 2, 64, 17, 2, 2, 64, 0, -1, 3},
    {"causal alibi/head T1 d128", 1, 1, 1, 2, 1, 128, 1, -1, -1, 0.0f, Alibi::head},
    {"causal window(8,0) softcap 3 200x17 d64 (rows without keys)", 1, 200, 17, 2, 1, 64, 1, 8, -1, 3.0f},
    {"window(3,2) fp16 softcap 4 129x130 d128", 1, 129, 130, 2, 2, 128, 0, 3, 2, 4.0f, Alibi::none, FLASHBOX_FLOAT16},
    // The overlapped transformed paths (ALiBi alone at d64/d128, softcap at d128: u = 1 - t^2 kept as
    // f16 across dP's wait), each dtype; a cap of 0.5 saturates tanh (u near 0) on many scores.
    {"causal softcap 0.5 T129 d128 (saturated tanh)", 2, 129, 129, 2, 2, 128, 1, -1, -1, 0.5f},
    {"alibi/batch 64x130 GQA d128", 2, 64, 130, 4, 2, 128, 0, -1, -1, 0.0f, Alibi::batch},
    {"causal alibi/head fp16 T65 d64", 2, 65, 65, 2, 2, 64, 1, -1, -1, 0.0f, Alibi::head, FLASHBOX_FLOAT16},
    {"causal window(20,0) softcap 3 alibi/batch fp16 130x129 d128", 2, 130, 129, 2, 1, 128, 1, 20, -1, 3.0f,
     Alibi::batch, FLASHBOX_FLOAT16},
    // Steps where one consumer's 64 keys see none of the query block's rows (what a skip of that half
    // would have to get right; bench/NOTES.md, "the backward's half skip"): narrow windows on both
    // sides, a causal diagonal moved by seqlen_k - seqlen_q, a key half wholly past seqlen_k.
    {"causal window(64,0) T512 d128 (rowless key halves at both edges)", 1, 512, 512, 2, 2, 128, 1, 64},
    {"window(0,64) 256x384 d64 (keys ahead of the rows)", 2, 256, 384, 2, 1, 64, 0, 0, 64},
    {"causal 192x448 GQA d128 (diagonal moved by 256)", 1, 192, 448, 4, 2, 128, 1},
    {"window(127,0) 300x300 d64", 1, 300, 300, 2, 2, 64, 0, 127, 0},
    {"window(200,-1) 65x150 d128 (a half wholly past seqlen_k)", 2, 65, 150, 2, 2, 128, 0, 200, -1},
};

// T = 1000 and 4097: many K/V blocks, windows far narrower than T (blocks skipped at both ends).
const std::vector<BwdCase> kLarge = {
    {"causal window(100,0) T1000 GQA d64", 1, 1000, 1000, 4, 2, 64, 1, 100},
    {"window(64,64) 300x1000 MQA d128", 1, 300, 1000, 2, 1, 128, 0, 64, 64},
    {"causal softcap 10 alibi/batch 1000x300 d64", 2, 1000, 300, 2, 2, 64, 1, -1, -1, 10.0f, Alibi::batch},
    {"softcap 30 T1000 GQA d128", 1, 1000, 1000, 4, 2, 128, 0, -1, -1, 30.0f},
    {"alibi/head 1000x1017 d128", 1, 1000, 1017, 2, 2, 128, 0, -1, -1, 0.0f, Alibi::head},
    {"causal window(300,0) softcap 20 T4097 GQA d128", 1, 4097, 4097, 2, 1, 128, 1, 300, -1, 20.0f},
    {"window(200,500) alibi/head T4097 d64", 1, 4097, 4097, 2, 1, 64, 0, 200, 500, 0.0f, Alibi::head},
    {"causal alibi/batch T2048 GQA d128", 1, 2048, 2048, 4, 2, 128, 1, -1, -1, 0.0f, Alibi::batch},
    {"causal softcap 30 T2048 d128", 1, 2048, 2048, 2, 2, 128, 1, -1, -1, 30.0f},
    {"softcap 50 alibi/head fp16 T1000 d128", 1, 1000, 1000, 2, 2, 128, 0, -1, -1, 50.0f, Alibi::head,
     FLASHBOX_FLOAT16},
    {"causal alibi/head fp16 T1000 GQA d64", 1, 1000, 1000, 4, 2, 64, 1, -1, -1, 0.0f, Alibi::head, FLASHBOX_FLOAT16},
};

TEST(Sm90BwdMods, SmallCases) { run_cases(kSmall, Size::small); }

TEST(Sm90BwdMods, LargeCases) { run_cases(kLarge, Size::large); }

}  // namespace
}  // namespace flashbox::test::sm90_bwd_mods
