#!/usr/bin/env bash
# The sm90 forward's masks, score transforms and head_dim 256 on the H200, in one call: the GPU tests
# (test_sm90_mods, and test_sm90 for the plain kernel whose tile loop bounds changed), compute-sanitizer
# memcheck on small shapes, then bench/compare_masks.py (window / softcap / ALiBi against the plain
# kernel, SDPA for context) and its --d256 mode (head_dim 256 against SDPA's flash and cuDNN).
# Prebuilt binaries come as a tarball built on the CPU machine (libflashbox.so, test_sm90,
# test_sm90_mods, libsm90_plan_shim.so, lib/libgomp.so.1):
#   bench/sm90_mods_device_run.sh .dev/sm90fwd.tar.gz [STEP,STEP,...]
# Every step has its own time limit; logs go to $OUT.
set -u
. "$(dirname "$0")/device_steps.sh" "$1" sm90_mods "${2:-all}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"

step test_sm90_mods timeout 60 $B/test_sm90_mods --gtest_brief=1
step test_sm90 timeout 35 $B/test_sm90 --gtest_brief=1
step compare_masks timeout 55 python3 bench/compare_masks.py $B/libflashbox.so --seqlens 4096,16384 \
  --json "$O/compare_masks.json"
step memcheck timeout 35 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.SlidingWindow:Sm90Mods.Alibi:Sm90Mods.HeadDim256'
step compare_d256 timeout 30 python3 bench/compare_masks.py $B/libflashbox.so --d256 $B/libsm90_plan_shim.so \
  --seqlens 2048,4096,16384 --json "$O/compare_d256.json"
grep -E "^(==|rc=)" "$log" | tail -20
