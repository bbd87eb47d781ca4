#!/usr/bin/env bash
# One device call for the backward (run by the `run` tool from the repository root, build carried in
# build-bwd): GPU tests, compute-sanitizer memcheck/racecheck on small shapes, then the SDPA comparison
# of the backward. Logs go to $OUT (at most 8 files).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}:$PWD/build-bwd/rt
B=build-bwd
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > "$OUT/gpu.txt" 2>&1
mode=${1:-all}
if [ "$mode" = all ] || [ "$mode" = tests ]; then
  OMP_NUM_THREADS=16 timeout 120 $B/tests/test_backward --gtest_brief=0 2>&1 | tee "$OUT/test_backward.log" | grep -E "FAILED|PASSED|SKIPPED|error" | head -40
  small='CudaBackward.StridedLayoutsAndScale:CudaBackward.EmptyRowsGiveZeroDq:Shapes/CudaBackwardShapes.BothModesMatchReference/?'
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_backward --gtest_filter="$small" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; tail -3 "$OUT/memcheck.log"
  timeout 45 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/test_backward --gtest_filter='CudaBackward.EmptyRowsGiveZeroDq' > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$?"; tail -3 "$OUT/racecheck.log"
  # The head_dim-64 kernel variant with 64 Q rows per step (one CTA per SM): the CUDA tests again.
  FLASHBOX_BWD_BLOCK_Q=64 OMP_NUM_THREADS=16 timeout 90 $B/tests/test_backward --gtest_filter='*Cuda*' > "$OUT/test_backward_bq64.log" 2>&1
  echo "bq64 tests rc=$?"; grep -E "FAILED|PASSED" "$OUT/test_backward_bq64.log" | head
  FLASHBOX_BWD_BLOCK_Q=64 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_backward --gtest_filter="$small" > "$OUT/memcheck_bq64.log" 2>&1
  echo "bq64 memcheck rc=$?"; tail -1 "$OUT/memcheck_bq64.log"
fi
if [ "$mode" = all ] || [ "$mode" = bench ]; then
  FLASHBOX_BWD_BLOCK_Q=64 PYTHONUNBUFFERED=1 timeout 120 python3 bench/compare_sdpa.py $B/libflashbox.so --backward --no-naive \
    --configs 64:12 --seqlens 1024,2048,4096,8192,16384 2>&1 | tee "$OUT/compare_sdpa_backward_bq64.log" | tail -7
fi
if [ "$mode" = all ] || [ "$mode" = bench ]; then
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/compare_sdpa.py $B/libflashbox.so --backward --no-naive --seqlens ${SEQLENS:-1024,2048,4096,8192,16384} \
    --json "$OUT/compare_sdpa_backward.json" 2>&1 | tee "$OUT/compare_sdpa_backward.log" | tail -40
fi
