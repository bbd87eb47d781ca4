#!/usr/bin/env bash
# The closing device run of a session, in one call on the H200: the main job on the GPU (flashbox
# report: check, bench incl. backward, GPT-2 124M), flashbox vs PyTorch SDPA forward and backward in
# one process (compare_sdpa.py), naive's out-of-memory row, the Python package's tests, and the GPU
# test suites (test_backward, test_cuda, test_sm90). Prebuilt binaries come as a tarball (built on
# the CPU machine, `carry`ed):
#   bench/device_final_run.sh .dev/final.tar.gz [STEP,STEP,...]   (default: every step)
# Every step has its own time limit so one hang costs a step, not the call. Logs go to $OUT.
set -u
O=${OUT:-/tmp/final_out}; mkdir -p "$O"
B=/tmp/fb; mkdir -p $B && tar -xzf "$1" -C $B
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/libflashbox.so PYTHONPATH=python
log="$O/run.log"
ONLY=",${2:-all},"
step() {
  case "$ONLY" in *,all,*|*",$1,"*) ;; *) return 0 ;; esac
  local s=$(date +%s); echo "== $1" | tee -a "$log"; shift; "$@" >>"$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"

# Most important first: if the device budget ends mid-call, what ran is still under $OUT.
step test_backward timeout 150 $B/test_backward --gtest_brief=1
step test_cuda timeout 60 $B/test_cuda --gtest_brief=1
step test_sm90 timeout 60 $B/test_sm90 --gtest_brief=1
step compare_fwd timeout 90 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_fwd.json"
step compare_fwd_noncausal timeout 40 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --non-causal --seqlens 16384 --json "$O/compare_fwd_noncausal.json"
step compare_bwd timeout 60 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --backward --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_bwd.json"
step memcheck timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.StridedLayoutsAndScale:CudaBackward.EmptyRowsGiveZeroDq:CudaBackward.HopperRunsTheSm90Kernels'
step pytest timeout 90 python3 -m pytest -q -rs tests/python
step report timeout 120 $B/flashbox report --json "$O/report_h200.json"
step naive_oom sh -c "timeout 25 $B/flashbox bench --seqlens 16384,32768 --impls naive,flash --json > '$O/bench_oom.json'"
grep -E "^(==|rc=)" "$log" | tail -30
