#!/usr/bin/env bash
# One device call for the Hopper d192 backward (branch sm90-bwd-d192, sm90 backward v15: consumer 0
# owns dV, consumer 1 dK, a 3-deep Q/dO ring; head dims 136..192): its tests against the fp64
# reference, compute-sanitizer memcheck on its small cases, the d256 kernel's tests (200..256 now),
# the head-dim plan tests; then the speed at d192 (B4 H8 causal bf16, T 1024..16384): this build
# against an earlier one (old/libflashbox.so: main's, where 136..192 run the d256 kernel) and cuDNN,
# interleaved in one process (compare_builds.py); compare_sdpa.py --backward at d192 and d256 against
# cuDNN / FA2 / efficient; test_sm90_bwd_mods, then every backward (test_backward) with what is left.
# Prebuilt binaries as a tarball (bench/sm90_bwd_d192_pack.sh builds it on the CPU machine into
# /work/main/.carry/bwd192/):
#   bench/sm90_bwd_d192_device_run.sh ../bin.tar.gz [SECONDS]      (run from the source tree; 185)
# Device call:
#   run(command="cd .carry/bwd192/src && bash bench/sm90_bwd_d192_device_run.sh ../bin.tar.gz 185",
#       carry=[".carry/bwd192"], timeout_s=200)
# Most important first; every step gets at most its own limit and what is left of SECONDS.
set -u
DEADLINE=$(( $(date +%s) + ${2:-185} ))
. "$(dirname "$0")/device_steps.sh" "$1" bwd192 all
timed() {  # timed NAME LIMIT CMD...: step NAME under LIMIT or what is left, skipped under 5 s
  local name=$1 limit=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) - 2 ))
  (( left < limit )) && limit=$left
  if (( limit < 5 )); then echo "== $name skipped (no time left)" | tee -a "$log"; return 0; fi
  step "$name" timeout $limit "$@"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"
timed test_sm90_bwd_d192 30 $B/test_sm90_bwd_d192 --gtest_brief=1
timed memcheck_d192 25 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_d192 --gtest_brief=1 --gtest_filter='Sm90BwdD192.SmallCases'
timed test_sm90_bwd_d256 20 $B/test_sm90_bwd_d256 --gtest_brief=1
timed test_cuda_head_dims 15 $B/test_cuda --gtest_brief=1 --gtest_filter='HeadDimPlan.*:ExtSm80.HeadDimsAbove128*'
# The d192 backward on its own kernel (new) against the same calls on the d256 kernel (old) and cuDNN.
[ -f $B/old/libflashbox.so ] && timed compare_builds_d192 60 python3 bench/compare_builds.py new=$B/libflashbox.so \
  old=$B/old/libflashbox.so --rounds 2 --shapes 192:8:1024:1,192:8:2048:1,192:8:4096:1,192:8:8192:1,192:8:16384:1 \
  --json "$O/compare_builds_d192.json"
timed compare_bwd_d192_d256 45 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --backward \
  --configs 192:8,256:8 --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_bwd.json"
timed test_sm90_bwd_mods 10 $B/test_sm90_bwd_mods --gtest_brief=1
timed test_backward 70 $B/test_backward --gtest_brief=1
echo "done" | tee -a "$log"
grep -E "^(==|rc=)|ERROR SUMMARY|FAILED|PASSED|worst gradient|D192 H8" "$log"
