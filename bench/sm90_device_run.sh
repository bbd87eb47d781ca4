#!/usr/bin/env bash
# One device call for the Hopper forward. Runs prebuilt binaries carried in one folder (default
# .dev/h7: libflashbox.so, test_sm90, test_cuda, test_backward; lib/ may hold runtime libraries the
# device lacks, e.g. libgomp), every step under its own time limit so that a hang costs one step,
# not the call. Logs go to $OUT (at most 8 files come back: gpu.txt, tests.log, sanitizer.log,
# sched.txt, sched.json, compare.txt, compare_causal.json, compare_noncausal.json).
#   bash bench/sm90_device_run.sh        # tests, memcheck, sm90_sched.py, compare_sdpa
# SM90_DIR overrides the binary folder; OLD_LIBS="name=path ..." adds older builds to sm90_sched.py
# (the same tensors, interleaved rounds: a before/after measurement in one process).
set -u
D=$(cd "${SM90_DIR:-.dev/h7}" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$D/lib:${LD_LIBRARY_PATH:-}
O=${OUT:-/tmp/sm90_out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$O/gpu.txt"
summary() { grep -E "^\[ +(FAILED|PASSED) |tests? ran" "$1" | tail -${2:-6}; grep -E "Failure" -A4 "$1" | head -30; }

# 1. The GPU suites: sm90 forward (persistent cases last: a hang shows its case in the log), the
# project's CUDA tests (impl = FLASH dispatches to sm90 here), the backward (shares the wgmma and
# TMA helpers).
timeout 45 $D/test_sm90 --gtest_filter='-Sm90.Persistent*' > "$O/tests.log" 2>&1
echo "test_sm90 (grid) rc=$?"
timeout 45 $D/test_sm90 --gtest_filter='Sm90.Persistent*' >> "$O/tests.log" 2>&1
echo "test_sm90 (persistent) rc=$?"
summary "$O/tests.log" 4
timeout 90 $D/test_cuda >> "$O/tests.log" 2>&1
echo "test_cuda rc=$?"; summary "$O/tests.log" 2
if [ -x $D/test_backward ]; then
  OMP_NUM_THREADS=16 timeout 150 $D/test_backward --gtest_filter='*Cuda*' >> "$O/tests.log" 2>&1
  echo "test_backward (CUDA cases) rc=$?"; summary "$O/tests.log" 2
fi

# 2. compute-sanitizer on small shapes, both schedules.
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $D/test_sm90 \
  --gtest_filter='Sm90.SmallShapes:Sm90.PersistentManyTilesPerCta:Sm90.DifferentQueryAndKeyLengths' > "$O/sanitizer.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/sanitizer.log" | tail -3

# 3. Variants interleaved with cuDNN (and older builds), then the yardstick: compare_sdpa.
libs=""; for l in ${OLD_LIBS:-}; do libs="$libs --lib $l"; done
PYTHONUNBUFFERED=1 timeout 150 python3 bench/sm90_sched.py $D/libflashbox.so --set v5 $libs --json "$O/sched.json" \
  > "$O/sched.txt" 2>&1
echo "sched rc=$?"; cat "$O/sched.txt"
C="python3 bench/compare_sdpa.py $D/libflashbox.so --flash-arch sm90 --no-naive"
timeout 80 $C --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_causal.json" > "$O/compare.txt" 2>&1
echo "compare causal rc=$?"
timeout 60 $C --non-causal --seqlens 16384 --json "$O/compare_noncausal.json" >> "$O/compare.txt" 2>&1
echo "compare non-causal rc=$?"
grep -vE "^-+$" "$O/compare.txt"

cuobjdump --dump-sass $D/libflashbox.so > /tmp/sass.txt 2>/dev/null
echo "SASS: HGMMA $(grep -c HGMMA /tmp/sass.txt), LDL $(grep -c 'LDL' /tmp/sass.txt), STL $(grep -c 'STL' /tmp/sass.txt)" | tee -a "$O/gpu.txt"
