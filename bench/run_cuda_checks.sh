#!/bin/bash
# The GPU checks and measurements of the sm80 forward, in one command on the device machine:
#   bench/run_cuda_checks.sh BIN_DIR OUT_DIR [tests] [sanitize] [sass] [sweep] [compare] [compare_sm80]
#                            [gpt2_swap] [python_overhead] [pytest]
# BIN_DIR holds test_cuda and libflashbox.so built elsewhere (lib/ beside them: fallback shared
# libraries; sm80_sweep: bench/sm80_tile_sweep.cu prebuilt, else it is compiled here; corpus_tokens.bin:
# a token file for gpt2_swap, else random tokens); logs go to OUT_DIR: test_cuda.log, sanitizer.log,
# sm80_sweep.log, compare_sdpa*.{log,json}, gpt2_swap.{log,json}, python_overhead.{log,json}, pytest.log.
set -u
BIN=$(realpath "$1"); OUT=$2; shift 2
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}:$BIN/lib
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$BIN/libflashbox.so PYTHONPATH=$PWD/python
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
SMALL='Cases/GpuForward.*_sq17_*:Cases/GpuForward.*_sq65_sk200_*:Cases/GpuForward.*_sq1_sk300_*'
# sm80 cases with several query blocks and K/V tiles (T = 1000, 4097): the ring and the causal skip.
SM80_LONG='Cases/GpuForward.*flash_sm80*_sq1000_*:Cases/GpuForward.*flash_sm80*_sq4097_*'
for step in "$@"; do
  start=$(date +%s)
  case $step in
    tests)
      timeout 90 "$BIN/test_cuda" --gtest_color=no >"$OUT/test_cuda.log" 2>&1
      echo "test_cuda rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$OUT/test_cuda.log" | head -40 ;;
    sanitize)
      { echo "== memcheck"; timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda" \
          --gtest_color=no --gtest_filter="$SMALL:$SM80_LONG:GpuNaiveMemory.Scratch*" 2>&1 | grep -vE "^\[ +(RUN|OK) "
        echo "memcheck rc=${PIPESTATUS[0]}"
        echo "== racecheck"; timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN/test_cuda" \
          --gtest_color=no --gtest_filter='Cases/GpuForward.*flash_sm80*_sq65_sk200_*:Cases/GpuForward.*flash_sm80*_sq17_*:Cases/GpuForward.*flash_sm80*_sq1000_*' 2>&1 \
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
      sweep=$BIN/sm80_sweep
      [ -x "$sweep" ] || { sweep=/tmp/sm80_sweep; nvcc -std=c++20 -O3 --use_fast_math \
        -gencode=arch=compute_90a,code=sm_90a -I src bench/sm80_tile_sweep.cu -o $sweep; }
      timeout 150 $sweep 1 >"$OUT/sm80_sweep.log" 2>&1; echo "sweep rc=$?"; tail -12 "$OUT/sm80_sweep.log" ;;
    compare)
      timeout 300 python3 bench/compare_sdpa.py "$BIN/libflashbox.so" --json "$OUT/compare_sdpa.json" \
        2>&1 | tee "$OUT/compare_sdpa.log" ;;
    compare_sm80)
      timeout 150 python3 bench/compare_sdpa.py "$BIN/libflashbox.so" --flash-arch sm80 --no-naive \
        --seqlens 1024,2048,4096,8192,16384 --json "$OUT/compare_sdpa_sm80.json" >"$OUT/compare_sdpa_sm80.log" 2>&1
      echo "compare_sm80 rc=$?"; tail -30 "$OUT/compare_sdpa_sm80.log" ;;
    gpt2_swap)
      tokens=(); [ -f "$BIN/corpus_tokens.bin" ] && tokens=(--tokens "$BIN/corpus_tokens.bin")
      timeout 150 python3 examples/gpt2_swap.py "${tokens[@]}" --attention sdpa,flashbox,naive --train-steps 20 \
        --json "$OUT/gpt2_swap.json" >"$OUT/gpt2_swap.log" 2>&1
      echo "gpt2_swap rc=$?"; grep -vE "^  step" "$OUT/gpt2_swap.log" | tail -12 ;;
    pytest)
      timeout 120 python3 -m pytest -q -rs tests/python >"$OUT/pytest.log" 2>&1
      echo "pytest rc=$?"; tail -5 "$OUT/pytest.log" ;;
    python_overhead)
      timeout 90 python3 bench/python_overhead.py --json "$OUT/python_overhead.json" >"$OUT/python_overhead.log" 2>&1
      echo "python_overhead rc=$?"; tail -9 "$OUT/python_overhead.log" ;;
  esac
  echo "## step $step took $(( $(date +%s) - start )) s"
done
