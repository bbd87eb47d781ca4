#!/usr/bin/env bash
# One device call for branch dqlag (bench/NOTES.md, sm90 backward "v17: dQ one step late"), most
# important first; LAG=1 marks the steps run with FLASHBOX_SM90_BWD_DQLAG=1 (the bf16 d64/d128 DQLAG
# kernels, "_dqlag" in the kernel name):
#   test_gpu_lag   every GPU test of test_backward with LAG=1 (bf16 non-deterministic and v9-order
#                  deterministic d64/d128 calls run the DQLAG kernels; 50-run bitwise checks included)
#   variants       bench/sm90_bwd_variants.py in one process: lag (the library with LAG=1), new (the
#                  same library without it: main's kernels, byte-identical cubins), old (main's build,
#                  when the tarball has old/libflashbox.so) and cuDNN; D64 H12 and D128 H16 causal
#                  T = 1024 .. 16384, non-causal D128 16384, GQA 32/8 D128 and D64 8192
#   mods_lag, memcheck_*_lag, racecheck_*_lag, varlen_lag   the masked backward, compute-sanitizer on
#                  small shapes, the varlen backward, all with LAG=1
#   mods, test_gpu   the same without the switch (the default kernels), as time allows
# Every step has its own limit, cut to what is left of SECONDS (default 230) in all.
# It ran once, at 9a342c1 (3503433 after the rebase onto main 5117407; bench/results/2026-12-01_sm90_bwd_dqlag/). After that commit bf16 d128
# runs DQLAG by default and the switch is gone (the variable is then ignored: lag = new, and the
# A/B that remains is new against old, main's build).
#
# Packing, on the CPU machine (builds BUILD, default build-cuda; OLD_LIB: main's libflashbox.so):
#   cd /work/wt/dqlag && rm -rf /work/main/.carry/dqlag && mkdir -p /work/main/.carry/dqlag/src && \
#     git archive HEAD | tar -x -C /work/main/.carry/dqlag/src && \
#     OLD_LIB=/work/main/build/libflashbox.so bash bench/sm90_bwd_dqlag_device_run.sh --pack \
#       /work/main/.carry/dqlag/dqlag.tar.gz build-cuda
# Device call:
#   run(command="cd .carry/dqlag/src && bash bench/sm90_bwd_dqlag_device_run.sh ../dqlag.tar.gz 230",
#       carry=[".carry/dqlag"], timeout_s=240)
#   bash bench/sm90_bwd_dqlag_device_run.sh TARBALL [SECONDS] [STEP,STEP,...]
set -u
tests="tests/test_backward tests/sm90/test_sm90_bwd_mods tests/sm90/test_sm90_bwd_varlen"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $(for t in $tests; do basename $t; done)
. "$(dirname "$0")/device_steps.sh" "$1" dqlag "${3:-all}"
begin_call ${2:-230}
LAG="env FLASHBOX_SM90_BWD_DQLAG=1"
tstep test_gpu_lag 90 $LAG $B/test_backward --gtest_filter='*Cuda*:BackwardApi.*'
builds="lag=$B/libflashbox.so new=$B/libflashbox.so"
[ -f $B/old/libflashbox.so ] && builds="$builds old=$B/old/libflashbox.so"
shapes_v=$(for t in 1024 2048 4096 8192 16384; do printf '64:12:%s:1,' $t; done; \
  for t in 1024 2048 4096 8192 16384; do printf '128:16:%s:1,' $t; done; echo '128:16:16384:0,128:32:8192:1:8,64:32:8192:1:8')
tstep variants 75 python3 bench/sm90_bwd_variants.py $builds --env lag:FLASHBOX_SM90_BWD_DQLAG=1 --rounds 3 \
  --shapes "$shapes_v" --json "$O/variants.json"
tstep mods_lag 15 $LAG $B/test_sm90_bwd_mods --gtest_brief=1
shapes='Shapes/CudaBackwardShapes.BothModesMatchReference'
plain="$shapes/22:$shapes/23:$shapes/42:$shapes/43"
for tool in memcheck racecheck; do
  tstep ${tool}_plain_lag 20 $LAG compute-sanitizer --tool $tool --error-exitcode 9 $B/test_backward --gtest_brief=1 \
    --gtest_filter="$plain"
  tstep ${tool}_mods_lag 20 $LAG FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/test_sm90_bwd_mods --gtest_brief=1 --gtest_filter='Sm90BwdMods.SmallCases'
done
tstep varlen_lag 15 $LAG $B/test_sm90_bwd_varlen --gtest_brief=1
tstep mods 10 $B/test_sm90_bwd_mods --gtest_brief=1
tstep test_gpu 90 $B/test_backward --gtest_filter='*Cuda*:BackwardApi.*'
grep -E "^(==|rc=)|^D(64|128) |ERROR|FAILED|PASSED|RACECHECK SUMMARY|ERROR SUMMARY" "$log" | tail -70
