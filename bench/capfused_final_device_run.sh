#!/usr/bin/env bash
# One device call (2026-12-02): the build of main with the fused softcap (CAP_FUSED, d128 MODS kernels)
#   tests     test_sm90_mods, test_sm90, test_cuda; compute-sanitizer memcheck of test_sm90_mods' softcap cases
#             on small shapes (FLASHBOX_SM90_MODS_SMALL=1)
#   masks     compare_masks.py (forward: plain, softcap 30, ALiBi, windows 1024 / 4096 and their same-work
#             peers, SDPA beside), B4 bf16, D64 H12 and D128 H16, T 4096 and 16384
#   bwd       compare_sdpa.py --backward, causal, T 1024..16384 (issue 15's table), and sm90_bwd_variants.py
#             for the non-causal and GQA rows against cuDNN
# Packing: bash bench/pack_final.sh .carry/lead/final.tar.gz build-cuda test_sm90_mods test_sm90 test_cuda flashbox
# Device call: run(command="bash bench/capfused_final_device_run.sh .carry/lead/final.tar.gz 480",
#   carry=[".carry/lead"], timeout_s=500)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" capfused "${3:-all}"
begin_call ${2:-480}
step test_sm90_mods timeout 60 $B/test_sm90_mods --gtest_brief=1
step test_sm90 timeout 60 $B/test_sm90 --gtest_brief=1
step test_cuda timeout 120 $B/test_cuda --gtest_brief=1
step memcheck_softcap timeout 60 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.Softcap*:Sm90Mods.OptimisticFallbackOnMaskedBlocks'
step masks timeout 120 python3 "$here/compare_masks.py" $B/libflashbox.so --seqlens 4096,16384 --windows 1024,4096 \
  --json "$O/compare_masks.json"
step bwd timeout 70 python3 "$here/compare_sdpa.py" $B/libflashbox.so --no-naive --backward \
  --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_bwd.json"
step bwd_rows timeout 60 python3 "$here/sm90_bwd_variants.py" main=$B/libflashbox.so --rounds 3 \
  --shapes 128:16:16384:0,128:32:8192:1:8,64:12:16384:1,128:16:16384:1 --json "$O/bwd_rows.json"
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|^D(64|128)|ratio|softcap|window|alibi|plain" "$log" | tail -80
