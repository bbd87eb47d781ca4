#!/usr/bin/env bash
# One device call for the Hopper d256 backward (branch sm90-bwd-d256): its tests, the backward suite,
# compute-sanitizer on its small cases, and flashbox against SDPA (cuDNN / FA2 / efficient) and the
# sm80 backward that ran these head dims before, on the same tensors. Prebuilt binaries as a tarball:
#   bench/sm90_bwd_d256_device_run.sh bwd256.tar.gz [SECONDS]      (run from the source tree)
# (libflashbox.so, test_sm90_bwd_d256, test_sm90_bwd_mods, test_backward, test_cuda, lib/ with libgomp;
# optional old/libflashbox.so: an earlier build, timed against this one by compare_builds.py.)
# Most important first; every step gets at most its own limit and what is left of SECONDS (180).
set -u
O=${OUT:-/tmp/bwd256_out}; mkdir -p "$O"
B=/tmp/bwd256; mkdir -p $B && tar -xzf "$1" -C $B
DEADLINE=$(( $(date +%s) + ${2:-180} ))
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
step test_sm90_bwd_d256 40 $B/test_sm90_bwd_d256 --gtest_brief=1
step memcheck_d256 30 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_d256 --gtest_brief=1 --gtest_filter='Sm90BwdD256.SmallCases'
step compare_bwd_d256 35 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --backward --configs 256:8 \
  --seqlens 1024,2048,4096,8192,16384 --also-families sm80 --json "$O/compare_bwd_d256.json"
# This build against an earlier one when the tarball has old/libflashbox.so (v14 against v13), interleaved.
[ -f $B/old/libflashbox.so ] && step compare_builds_d256 40 python3 bench/compare_builds.py new=$B/libflashbox.so \
  old=$B/old/libflashbox.so --rounds 2 --shapes 256:8:4096:1,256:8:16384:1,256:8:16384:0 --json "$O/compare_builds_d256.json"
step test_sm90_bwd_mods 12 $B/test_sm90_bwd_mods --gtest_brief=1
step test_cuda_head_dims 20 $B/test_cuda --gtest_brief=1 --gtest_filter='HeadDimPlan.*:ExtSm80.HeadDimsAbove128*'
step test_backward 80 $B/test_backward --gtest_brief=1
step compare_bwd_d192 20 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --backward --configs 192:8 \
  --seqlens 2048,8192,16384 --also-families sm80 --json "$O/compare_bwd_d192.json"
echo "done" | tee -a "$log"
