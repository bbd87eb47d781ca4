#!/usr/bin/env bash
# The sm90 varlen forward's checks in one call on the H200 (2026-12-01): its GPU test, the varlen
# benchmark (bench/sm90_varlen_bench.cpp: sm90 varlen against the sum of fixed-length calls and
# against the sm80 varlen path, one process), compute-sanitizer memcheck on the small varlen cases,
# the Hopper forward's own tests, the fixed-length regression check against cuDNN
# (bench/compare_sdpa.py, D64/D128 causal T 4096 and 16384), the mods tests and test_cuda.
# Prebuilt binaries come as a tarball (built on the CPU machine, carried):
#   bench/sm90_varlen_device_run.sh .carry/varlen/bin.tar.gz
# (libflashbox.so, test_sm90_varlen, test_sm90, test_sm90_mods, test_cuda, sm90_varlen_bench, lib/).
# Every step has its own time limit, most important first; logs go to $OUT.
set -u
O=${OUT:-/tmp/varlen_out}; mkdir -p "$O"
B=/tmp/fb; mkdir -p $B && tar -xzf "$1" -C $B
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/libflashbox.so PYTHONPATH=python
log="$O/run.log"
step() {
  local s=$(date +%s); echo "== $1" | tee -a "$log"; shift; "$@" >>"$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"
step test_sm90_varlen timeout 70 $B/test_sm90_varlen --gtest_brief=1
step varlen_bench timeout 35 $B/sm90_varlen_bench --json "$O/varlen_bench.json"
step memcheck_varlen timeout 45 env FLASHBOX_SM90_VARLEN_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_varlen --gtest_brief=1 \
  --gtest_filter='Sm90Varlen.TileEdges:Sm90Varlen.DifferentLengths:Sm90Varlen.MalformedCuSeqlensStayInBounds:Sm90Varlen.WindowsSoftcapAlibi:Sm90Varlen.ManySequences'
step test_sm90 timeout 25 $B/test_sm90 --gtest_brief=1
step compare_fwd timeout 40 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --seqlens 4096,16384 --json "$O/compare_fwd.json"
step test_sm90_mods timeout 25 $B/test_sm90_mods --gtest_brief=1
step test_cuda timeout 20 $B/test_cuda --gtest_brief=1
grep -E "^(==|rc=)" "$log"
