#!/usr/bin/env bash
# One device call for the backward (run by the `run` tool from the repository root; the build is
# carried in $B, default build-bwd, with rt/ holding fallback shared libraries): GPU tests on the
# default path (the sm90 kernels on an H200) and on the sm80 kernels, compute-sanitizer memcheck /
# racecheck on small shapes, the SASS instruction mix of the sm90 kernel, then the SDPA comparison.
#   bash tests/backward/device_run.sh [all|tests|bench]
set -u
B=${B:-build-bwd}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}:$PWD/$B/rt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > "$OUT/gpu.txt" 2>&1
mode=${1:-all}
small='CudaBackward.StridedLayoutsAndScale:CudaBackward.EmptyRowsGiveZeroDq:CudaBackward.HopperRunsTheSm90Kernels:Shapes/CudaBackwardShapes.BothModesMatchReference/?'
if [ "$mode" = all ] || [ "$mode" = tests ]; then
  OMP_NUM_THREADS=16 timeout 150 $B/tests/test_backward --gtest_brief=0 2>&1 | tee "$OUT/test_backward.log" | grep -E "FAILED|PASSED|SKIPPED|error" | head -40
  FLASHBOX_BWD_ARCH=sm80 OMP_NUM_THREADS=16 timeout 120 $B/tests/test_backward --gtest_filter='*Cuda*' > "$OUT/test_backward_sm80.log" 2>&1
  echo "sm80 tests rc=$?"; grep -E "FAILED|PASSED|SKIPPED" "$OUT/test_backward_sm80.log" | head
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_backward --gtest_filter="$small" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; tail -3 "$OUT/memcheck.log"
  timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_backward --gtest_filter='CudaBackward.EmptyRowsGiveZeroDq:CudaBackward.HopperRunsTheSm90Kernels' > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$?"; tail -3 "$OUT/racecheck.log"
  cuobjdump --dump-sass $B/libflashbox.so 2>/dev/null | awk '/Function :/{f=$3} {print f"\t"$0}' | grep flash_bwd_sm90_kernel > /tmp/bwd90.sass
  for f in $(cut -f1 /tmp/bwd90.sass | sort -u); do printf '%s\n ' "$f"; for op in HGMMA MUFU.EX2 LDS STS BAR.SYNC UBLKRED UBLKCP UTMALDG SYNCS LDL STL; do
    printf '%s=%s ' $op $(grep -F "$f" /tmp/bwd90.sass | grep -c " $op"); done; echo; done | tee "$OUT/sass_counts.log"
fi
if [ "$mode" = all ] || [ "$mode" = bench ]; then
  PYTHONUNBUFFERED=1 timeout 400 python3 bench/run.py --lib $B/libflashbox.so --suite backward --out "$OUT" 2>&1 |
    tee "$OUT/backward.log" | tail -20
fi
