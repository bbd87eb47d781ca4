#!/usr/bin/env bash
# Device calls (2026-12-02): the d64 backward's softcap path with its mask as -inf scores and a
# select per score (bench/NOTES.md sm90 backward "the d64 softcap's mask as a select"), against main
# (old/: 71fedec): first inside the one d64 kernel, then as its own instantiation (CAPSEL).
#   tests   test_sm90_bwd_mods, _varlen, memcheck on the small mods cases, test_backward's GPU tests,
#           memcheck on its small shapes
#   masks   compare_masks.py --backward of new, then of old (T 4096, 16384, W 1024), back to back
# Packing: OLD_LIB=<main's lib> PACK_NO_BUILD=1 bash bench/pack_final.sh /tmp/sel.tar.gz build-cuda test_backward \
#   test_sm90_bwd_mods test_sm90_bwd_varlen, stripped and re-packed as xz (.carry/lead/sel.tar.xz).
# Device call: run(command="bash bench/sm90_bwd_selmask_device_run.sh .carry/lead/sel.tar.xz 200",
#   carry=[".carry/lead"], timeout_s=220)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" sel "${3:-all}"
begin_call ${2:-200}
sh='Shapes/CudaBackwardShapes.BothModesMatchReference'
small="$sh/20:$sh/21:$sh/22:$sh/23:$sh/44:$sh/45:$sh/46:$sh/47:$sh/42:$sh/43:CudaBackward.EmptyRowsGiveZeroDq"
step test_sm90_bwd_mods timeout 40 $B/test_sm90_bwd_mods --gtest_brief=1
step test_sm90_bwd_varlen timeout 40 $B/test_sm90_bwd_varlen --gtest_brief=1
step memcheck_mods timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_varlen --gtest_brief=1 --gtest_filter='Sm90BwdVarlen.SmallWindowsSoftcapAlibi'
tstep plain_ab 40 python3 "$here/sm90_bwd_variants.py" new=$B/libflashbox.so old=$B/old/libflashbox.so --no-cudnn \
  --rounds 5 --shapes 64:12:2048:1,64:12:4096:1,64:12:16384:1,64:12:16384:0 --repeat-check none --json "$O/ab_plain.json"
for b in new=$B/libflashbox.so old=$B/old/libflashbox.so; do
  tstep masks_${b%%=*} 25 python3 "$here/compare_masks.py" ${b#*=} --backward --seqlens 4096,16384 --windows 1024 \
    --json "$O/compare_masks_bwd_${b%%=*}.json"
done
step test_backward timeout 80 env OMP_NUM_THREADS=14 $B/test_backward --gtest_brief=1 --gtest_filter='*Cuda*:BackwardApi.*'
step memcheck timeout 35 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_backward --gtest_brief=1 --gtest_filter="$small"
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|D64 .*(softcap|alibi)|^D64 H12/12" "$log" | cut -c1-150 | tail -50
