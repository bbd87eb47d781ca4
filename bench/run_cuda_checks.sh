#!/bin/bash
# The GPU session of the CUDA forward work, in one command on the device machine:
#   bench/run_cuda_checks.sh BIN_DIR OUT_DIR [tests] [sanitize] [sweep] [compare] [compare_sm80]
# BIN_DIR holds test_cuda and libflashbox.so built elsewhere (lib/ beside them: fallback shared
# libraries); logs go to OUT_DIR: test_cuda.log, sanitizer.log, sm80_sweep.log, compare_sdpa.{log,json}.
set -u
BIN=$(realpath "$1"); OUT=$2; shift 2
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}:$BIN/lib
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
SMALL='Cases/GpuForward.*_sq17_*:Cases/GpuForward.*_sq65_sk200_*:Cases/GpuForward.*_sq1_sk300_*'
for step in "$@"; do
  start=$(date +%s)
  case $step in
    tests)
      timeout 200 "$BIN/test_cuda" --gtest_color=no >"$OUT/test_cuda.log" 2>&1
      echo "test_cuda rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$OUT/test_cuda.log" | head -40 ;;
    sanitize)
      { echo "== memcheck"; timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda" \
          --gtest_color=no --gtest_filter="$SMALL:GpuNaiveMemory.Scratch*" 2>&1 | grep -vE "^\[ +(RUN|OK) "
        echo "memcheck rc=${PIPESTATUS[0]}"
        echo "== racecheck"; timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN/test_cuda" \
          --gtest_color=no --gtest_filter='Cases/GpuForward.*flash_sm80*_sq65_sk200_*:Cases/GpuForward.*flash_sm80*_sq17_*' 2>&1 \
          | grep -vE "^\[ +(RUN|OK) "
        echo "racecheck rc=${PIPESTATUS[0]}"; } >"$OUT/sanitizer.log" 2>&1
      grep -E "rc=|ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log" ;;
    sass)
      cuobjdump --dump-sass "$BIN/libflashbox.so" >/tmp/flashbox.sass 2>&1
      awk '/Function :/{f=$3} {print f"\t"$0}' /tmp/flashbox.sass | grep flash_fwd_sm80_kernel >/tmp/sm80.sass
      for f in $(cut -f1 /tmp/sm80.sass | sort -u); do
        printf '%s\n ' "$f"; for op in HMMA LDSM MUFU.EX2 FFMA FMUL FMNMX SHFL LDGSTS BAR.SYNC LDL STL; do
          printf '%s=%s ' $op $(grep -F "$f" /tmp/sm80.sass | grep -c " $op"); done; echo; done | tee "$OUT/sm80_sass_counts.log" ;;
    sweep)
      nvcc -std=c++20 -O3 --use_fast_math -gencode=arch=compute_90a,code=sm_90a -I src bench/sm80_tile_sweep.cu \
        -o /tmp/sm80_sweep && timeout 120 /tmp/sm80_sweep 1 >"$OUT/sm80_sweep.log" 2>&1; cat "$OUT/sm80_sweep.log" ;;
    compare)
      timeout 300 python3 bench/compare_sdpa.py "$BIN/libflashbox.so" --json "$OUT/compare_sdpa.json" \
        2>&1 | tee "$OUT/compare_sdpa.log" ;;
    compare_sm80)
      timeout 300 python3 bench/compare_sdpa.py "$BIN/libflashbox.so" --flash-arch sm80 \
        --json "$OUT/compare_sdpa_sm80.json" 2>&1 | tee "$OUT/compare_sdpa_sm80.log" ;;
  esac
  echo "## step $step took $(( $(date +%s) - start )) s"
done
