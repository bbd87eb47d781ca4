#!/usr/bin/env bash
# One device call for branch sm90-bwd-det-walk (bench/NOTES.md, sm90 backward "v16: the deterministic
# order per problem"), most important first:
#   test_gpu     every GPU test of test_backward (both dQ modes at every shape, both deterministic
#                orders 50 runs bitwise, the kernel names the order the plan picked; its CPU-only
#                tests run on the CPU machine)
#   variants     the backward timed non-deterministic and deterministic in one process
#                (bench/sm90_bwd_variants.py: D64 H12 and D128 H16 causal at T = 1024 .. 16384,
#                non-causal D128 16384, GQA 32/8 D128 and D64 8192; 50-run bitwise checks on three
#                shapes), against main's build when the tarball has old/libflashbox.so
#                ("non-deterministic unchanged", and v9's deterministic order on the same tensors)
#   test_sm90_bwd_mods   the masked backward (its deterministic runs take v10's order at bf16 d128 /
#                GQA d64 now, windows included)
#   memcheck_*, racecheck_*   compute-sanitizer on small shapes of both orders: the masked backward's
#                small cases and four plain shapes of test_backward with several key blocks
#   test_sm90_bwd_d256, test_sm90_bwd_varlen   the other Hopper backward suites (their kernels are
#                unchanged: same cubins, v9's order)
# Every step has its own limit, cut to what is left of SECONDS (default 280) in all.
#
# Packing, on the CPU machine (builds BUILD, default build-cuda, configured for 90a; OLD_LIB: an
# optional libflashbox.so of main to time against):
#   cd /work/wt/ring && rm -rf /work/main/.carry/detwalk && mkdir -p /work/main/.carry/detwalk/src && \
#     git archive HEAD | tar -x -C /work/main/.carry/detwalk/src && \
#     OLD_LIB=/work/main/build/libflashbox.so bash bench/sm90_bwd_det_walk_device_run.sh --pack \
#       /work/main/.carry/detwalk/detwalk.tar.gz build-cuda
# Device call:
#   run(command="cd .carry/detwalk/src && bash bench/sm90_bwd_det_walk_device_run.sh ../detwalk.tar.gz",
#       carry=[".carry/detwalk"], timeout_s=290)
#   (test_gpu alone: "... ../detwalk.tar.gz 130 test_gpu", timeout_s=140)
#   bash bench/sm90_bwd_det_walk_device_run.sh TARBALL [SECONDS] [STEP,STEP,...]
set -u
tests="tests/test_backward tests/sm90/test_sm90_bwd_mods tests/sm90/test_sm90_bwd_d256 tests/sm90/test_sm90_bwd_varlen"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $(for t in $tests; do basename $t; done)
. "$(dirname "$0")/device_steps.sh" "$1" detwalk "${3:-all}"
begin_call ${2:-280}
# Not brief: gtest flushes each test's line, so a step cut by its limit shows how far it got (at
# 60 s the 2026-12-01 call was cut with no line to show; main's whole test_backward takes 50-55 s).
tstep test_gpu 120 $B/test_backward --gtest_filter='*Cuda*:BackwardApi.*'
# The speed: every build non-deterministic, then deterministic, interleaved, three rounds (no cuDNN:
# the ratio to the non-deterministic build is the bar).
builds="new=$B/libflashbox.so" det=new
[ -f $B/old/libflashbox.so ] && builds="$builds old=$B/old/libflashbox.so" det=new,old
shapes_v=$(for t in 1024 2048 4096 8192 16384; do printf '64:12:%s:1,' $t; done; \
  for t in 1024 2048 4096 8192 16384; do printf '128:16:%s:1,' $t; done; echo '128:16:16384:0,128:32:8192:1:8,64:32:8192:1:8')
# 50-run bitwise checks on three of them: v9's order (D64 MHA), v10's (D128 MHA, D64 GQA).
tstep variants 60 python3 bench/sm90_bwd_variants.py $builds --det $det --rounds 3 --no-cudnn \
  --shapes "$shapes_v" --repeat-check 64:12:4096:1,128:16:2048:1,64:32:8192:1:8 --json "$O/variants.json"
tstep test_sm90_bwd_mods 15 $B/test_sm90_bwd_mods --gtest_brief=1
# compute-sanitizer on small shapes of both orders: the masked backward's small cases (bf16 GQA d64
# and d128: v10's order with windows; bf16 MHA d64 and fp16: v9's) and the plain shapes of
# test_backward with several key blocks (causal, bf16: v10's, fp16: v9's; d128 MHA 129, d64 GQA 3 200x333).
shapes='Shapes/CudaBackwardShapes.BothModesMatchReference'
plain="$shapes/22:$shapes/23:$shapes/42:$shapes/43"
for tool in memcheck racecheck; do
  tstep ${tool}_mods 20 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/test_sm90_bwd_mods --gtest_brief=1 --gtest_filter='Sm90BwdMods.SmallCases'
  tstep ${tool}_plain 20 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_backward --gtest_brief=1 \
    --gtest_filter="$plain"
done
tstep test_sm90_bwd_d256 10 $B/test_sm90_bwd_d256 --gtest_brief=1
tstep test_sm90_bwd_varlen 15 $B/test_sm90_bwd_varlen --gtest_brief=1
grep -E "^(==|rc=)|bitwise|^D(64|128) |ERROR|FAILED|PASSED|RACECHECK SUMMARY|ERROR SUMMARY" "$log" | tail -70
