#!/usr/bin/env bash
# One device call (2026-12-02): the sm90 backward with the mask as a pass before the exponentials (plain
# and ALiBi paths; bench/NOTES.md sm90 backward "the mask out of the loop") against main's library of
# bc24ede (old/libflashbox.so).
#   tests     test_backward's GPU tests, test_sm90_bwd_mods, _varlen, _pad_dims, _d96; compute-sanitizer
#             memcheck and racecheck on test_backward's small shapes
#   variants  sm90_bwd_variants.py new / old / cuDNN, one process, 5 rounds, B4 bf16
#   masks_bwd compare_masks.py --backward (plain, softcap, ALiBi, W1024 and same-work peers) of the new build
# Packing: OLD_LIB=<main's lib> PACK_NO_BUILD=1 bash bench/pack_final.sh .carry/lead/mask.tar.gz build-cuda \
#   test_backward test_sm90_bwd_mods test_sm90_bwd_varlen test_sm90_bwd_pad_dims test_sm90_bwd_d96
# Device call: run(command="bash bench/sm90_bwd_maskpass_device_run.sh .carry/lead/mask.tar.gz 330",
#   carry=[".carry/lead"], timeout_s=350)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" maskpass all
begin_call ${2:-300}
sh='Shapes/CudaBackwardShapes.BothModesMatchReference'
small="$sh/20:$sh/21:$sh/22:$sh/23:$sh/44:$sh/45:$sh/46:$sh/47:$sh/42:$sh/43:CudaBackward.EmptyRowsGiveZeroDq"
step test_backward timeout 110 env OMP_NUM_THREADS=14 $B/test_backward --gtest_brief=1 --gtest_filter='*Cuda*:BackwardApi.*'
for t in test_sm90_bwd_mods test_sm90_bwd_varlen test_sm90_bwd_pad_dims test_sm90_bwd_d96; do
  step $t timeout 40 $B/$t --gtest_brief=1
done
step memcheck timeout 35 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_backward --gtest_brief=1 --gtest_filter="$small"
step racecheck timeout 35 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_backward --gtest_brief=1 --gtest_filter="$small"
sv='64:12:2048:1,64:12:8192:1,64:12:16384:1,128:16:2048:1,128:16:8192:1,128:16:16384:1,128:16:16384:0,128:32:8192:1:8'
tstep variants 110 python3 "$here/sm90_bwd_variants.py" new=$B/libflashbox.so old=$B/old/libflashbox.so --rounds 5 \
  --shapes "$sv" --json "$O/variants.json"
step masks_bwd timeout 70 python3 "$here/compare_masks.py" $B/libflashbox.so --backward --seqlens 4096,16384 \
  --windows 1024 --json "$O/compare_masks_bwd.json"
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|^D(64|128) " "$log" | tail -60
