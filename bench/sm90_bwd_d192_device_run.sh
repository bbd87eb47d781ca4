#!/usr/bin/env bash
# One device call for the Hopper d192 backward (branch sm90-bwd-d192, sm90 backward v15: consumer 0
# owns dV, consumer 1 dK, a 3-deep Q/dO ring; head dims 136..192): its tests against the fp64
# reference, compute-sanitizer memcheck on its small cases, the d256 kernel's tests (200..256 now),
# the head-dim plan tests, compare_sdpa.py --backward at d192 and d256 (B4 H8 causal bf16, T 1024..16384)
# against cuDNN / FA2 / efficient and the sm80 backward on the same tensors, then every backward
# (test_backward) with what is left. Prebuilt binaries as a tarball (bench/sm90_bwd_d192_pack.sh
# builds it on the CPU machine into /work/main/.carry/bwd192/):
#   bench/sm90_bwd_d192_device_run.sh ../bin.tar.gz [SECONDS]      (run from the source tree; 150)
# Device call:
#   run(command="cd .carry/bwd192/src && bash bench/sm90_bwd_d192_device_run.sh ../bin.tar.gz 150",
#       carry=[".carry/bwd192"], timeout_s=170)
# Most important first; every step gets at most its own limit and what is left of SECONDS.
set -u
O=${OUT:-/tmp/bwd192_out}; mkdir -p "$O"
B=/tmp/bwd192; mkdir -p $B && tar -xzf "$1" -C $B
DEADLINE=$(( $(date +%s) + ${2:-150} ))
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/libflashbox.so PYTHONPATH=python
log="$O/run.log"
step() {  # step NAME LIMIT CMD...
  local name=$1 limit=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) - 2 ))
  (( left < limit )) && limit=$left
  if (( limit < 5 )); then echo "== $name skipped (no time left)" | tee -a "$log"; return 0; fi
  local s=$(date +%s); echo "== $name (limit $limit s)" | tee -a "$log"
  timeout $limit "$@" >>"$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"
step test_sm90_bwd_d192 30 $B/test_sm90_bwd_d192 --gtest_brief=1
step memcheck_d192 25 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_d192 --gtest_brief=1 --gtest_filter='Sm90BwdD192.SmallCases'
step test_sm90_bwd_d256 20 $B/test_sm90_bwd_d256 --gtest_brief=1
step test_cuda_head_dims 20 $B/test_cuda --gtest_brief=1 --gtest_filter='HeadDimPlan.*:ExtSm80.HeadDimsAbove128*'
step compare_bwd_d192_d256 60 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --backward \
  --configs 192:8,256:8 --seqlens 1024,2048,4096,8192,16384 --also-families sm80 --json "$O/compare_bwd.json"
step test_sm90_bwd_mods 10 $B/test_sm90_bwd_mods --gtest_brief=1
step test_backward 60 $B/test_backward --gtest_brief=1
# With what is left: this build against an earlier one (old/libflashbox.so, when packed), interleaved in
# one process: the d192 backward on its own kernel against the same calls on the d256 kernel.
[ -f $B/old/libflashbox.so ] && step compare_builds_d192 40 python3 bench/compare_builds.py new=$B/libflashbox.so \
  old=$B/old/libflashbox.so --rounds 2 --shapes 192:8:4096:1,192:8:16384:1 --json "$O/compare_builds_d192.json"
echo "done" | tee -a "$log"
grep -E "^(==|rc=)|ERROR SUMMARY|FAILED|worst gradient" "$log"
