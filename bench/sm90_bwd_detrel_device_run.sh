#!/usr/bin/env bash
# One device call for branch detrel (bench/NOTES.md, sm90 backward "v18": two dQ writer warps in the
# QDESC kernels), most important first, every step under its own limit (SECONDS in all, default 190):
#   test_sm90_bwd_mods   the masked backward, its deterministic runs twice each, bitwise (v10's order
#                at bf16 d128 / GQA d64 with windows: the changed kernels): the quick smoke test
#   variants     bench/sm90_bwd_variants.py, non-deterministic and deterministic, this build against
#                main's (old/), 3 interleaved rounds: the D128 H16 rows (causal T = 1024..16384,
#                non-causal 16384), GQA 32/8 D128 and D64, D64 H12 T1024 (v9's order, unchanged
#                code); 50-run bitwise checks on D128 H16 T2048, GQA 32/8 D64 and D64 H12 T1024
#   test_gpu     every GPU test of test_backward (the 50-run bitwise tests of both orders)
#   memcheck_*, racecheck_*   compute-sanitizer on small shapes of both orders (as v16's script)
# Packing, on the CPU machine:
#   cd /work/wt/detrel && rm -rf /work/main/.carry/detrel && mkdir -p /work/main/.carry/detrel/src && \
#     git archive HEAD | tar -x -C /work/main/.carry/detrel/src && \
#     OLD_LIB=/work/main/build/libflashbox.so bash bench/sm90_bwd_detrel_device_run.sh --pack \
#       /work/main/.carry/detrel/detrel.tar.gz build-cuda
# Device call:
#   run(command="cd .carry/detrel/src && bash bench/sm90_bwd_detrel_device_run.sh ../detrel.tar.gz 190",
#       carry=[".carry/detrel"], timeout_s=200)
set -u
tests="tests/test_backward tests/sm90/test_sm90_bwd_mods"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $(for t in $tests; do basename $t; done)
. "$(dirname "$0")/device_steps.sh" "$1" detrel "${3:-all}"
begin_call ${2:-190}
tstep test_sm90_bwd_mods 20 $B/test_sm90_bwd_mods --gtest_brief=1
builds="new=$B/libflashbox.so" det=new
[ -f $B/old/libflashbox.so ] && builds="$builds old=$B/old/libflashbox.so" det=new,old
shapes_v="64:12:1024:1,$(for t in 1024 2048 4096 8192 16384; do printf '128:16:%s:1,' $t; done)128:16:16384:0,128:32:8192:1:8,64:32:8192:1:8"
tstep variants 70 python3 bench/sm90_bwd_variants.py $builds --det $det --rounds 3 --no-cudnn \
  --shapes "$shapes_v" --repeat-check 128:16:2048:1,64:32:8192:1:8,64:12:1024:1 --json "$O/variants.json"
tstep test_gpu 90 $B/test_backward --gtest_filter='*Cuda*:BackwardApi.*'
shapes='Shapes/CudaBackwardShapes.BothModesMatchReference'
plain="$shapes/22:$shapes/23:$shapes/42:$shapes/43"
for tool in memcheck racecheck; do
  tstep ${tool}_mods 15 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/test_sm90_bwd_mods --gtest_brief=1 --gtest_filter='Sm90BwdMods.SmallCases'
  tstep ${tool}_plain 15 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_backward --gtest_brief=1 \
    --gtest_filter="$plain"
done
grep -E "^(==|rc=)|bitwise|^D(64|128) |ERROR|FAILED|PASSED|RACECHECK SUMMARY|ERROR SUMMARY" "$log" | tail -70
