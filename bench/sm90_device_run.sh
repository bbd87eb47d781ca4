#!/usr/bin/env bash
# One device call for the Hopper forward. Runs prebuilt binaries carried in one folder (default
# .dev/h7: libflashbox.so, test_sm90, sm90_bench, test_cuda and lib/ with the BLAS runtime), every
# step under its own time limit so that a hang costs one step, not the call. Logs go to $OUT (at
# most 8 files come back: gpu.txt, tests.log, sanitizer.log, compare.txt, two compare_*.json, and
# sm90_bench.{txt,json} or sched.{txt,json}).
#   bash bench/sm90_device_run.sh sched   # tests (persistent included), grid vs persistent, compare_sdpa
#   bash bench/sm90_device_run.sh final   # tests, test_cuda (defaults and dynamic), memcheck,
#                                         # sm90_sched.py, compare_sdpa (defaults, and dynamic)
# SM90_DIR overrides the binary folder.
set -u
PLAN=${1:-final}
D=${SM90_DIR:-.dev/h7}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$D/lib:${LD_LIBRARY_PATH:-}
O=${OUT:-/tmp/sm90_out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$O/gpu.txt"
summary() { grep -E "^\[ +(FAILED|PASSED) |tests? ran|(persistent|dynamic) case" "$1" | tail -${2:-6}; grep -E "Failure" -A4 "$1" | head -30; }

# 1. The sm90 tests: everything but the persistent and dynamic ones, then those (a hang in them shows
# its case in the log).
timeout 45 $D/test_sm90 --gtest_filter='-Sm90.Persistent*:Sm90.Dynamic*' > "$O/tests.log" 2>&1
echo "test_sm90 (grid) rc=$?"
timeout 45 $D/test_sm90 --gtest_filter='Sm90.Persistent*' >> "$O/tests.log" 2>&1
prc=$?; echo "test_sm90 (persistent) rc=$prc"
timeout 45 $D/test_sm90 --gtest_filter='Sm90.Dynamic*' >> "$O/tests.log" 2>&1
drc=$?; echo "test_sm90 (dynamic) rc=$drc"
summary "$O/tests.log" 8

C="python3 bench/compare_sdpa.py $D/libflashbox.so --flash-arch sm90 --no-naive"
if [ "$PLAN" = sched ]; then
  if [ $prc -eq 0 ]; then
    timeout 60 $D/sm90_bench --sched --json "$O/sm90_bench.json" > "$O/sm90_bench.txt" 2>&1
    echo "bench rc=$?"; cat "$O/sm90_bench.txt"
    export FLASHBOX_SM90_SCHED=persistent
    timeout 70 $C --seqlens 2048,4096,8192,16384 --json "$O/compare_persistent.json" > "$O/compare.txt" 2>&1
    echo "compare persistent rc=$?"
    timeout 30 $C --non-causal --configs 128:16 --seqlens 16384 >> "$O/compare.txt" 2>&1
    unset FLASHBOX_SM90_SCHED
    timeout 40 $C --seqlens 2048,4096 --json "$O/compare_grid.json" >> "$O/compare.txt" 2>&1
    echo "compare grid rc=$?"
    grep -vE "^-+$" "$O/compare.txt"
    # The team's GPU suite with persistent CTAs (impl = FLASH dispatches to sm90 here).
    FLASHBOX_SM90_SCHED=persistent timeout 60 $D/test_cuda >> "$O/tests.log" 2>&1
    echo "test_cuda (persistent) rc=$?"; summary "$O/tests.log" 3
    FLASHBOX_SM90_SCHED=persistent timeout 70 compute-sanitizer --tool memcheck $D/test_sm90 \
      --gtest_filter='Sm90.SmallShapes:Sm90.PersistentManyTilesPerCta' > "$O/sanitizer.log" 2>&1
    echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/sanitizer.log" | tail -3
  else
    timeout 40 $D/sm90_bench --final > "$O/sm90_bench.txt" 2>&1
    echo "bench (grid) rc=$?"; cat "$O/sm90_bench.txt"
  fi
else
  # The defaults as committed, the dynamic scheduler beside them; GPU suite both ways.
  timeout 60 $D/test_cuda >> "$O/tests.log" 2>&1
  echo "test_cuda rc=$?"; summary "$O/tests.log" 3
  if [ $drc -eq 0 ]; then
    FLASHBOX_SM90_SCHED=dynamic timeout 60 $D/test_cuda >> "$O/tests.log" 2>&1
    echo "test_cuda (dynamic) rc=$?"; summary "$O/tests.log" 3
  fi
  F='Sm90.SmallShapes:Sm90.PersistentManyTilesPerCta'; [ $drc -eq 0 ] && F="$F:Sm90.DynamicScheduler"
  timeout 100 compute-sanitizer --tool memcheck $D/test_sm90 --gtest_filter="$F" > "$O/sanitizer.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/sanitizer.log" | tail -3
  S=run6; [ $drc -eq 0 ] || S=run6-nodyn
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/sm90_sched.py $D/libflashbox.so --set $S --json "$O/sched.json" \
    > "$O/sched.txt" 2>&1
  echo "sched rc=$?"; cat "$O/sched.txt"
  timeout 60 $C --seqlens 2048,4096,8192,16384 --json "$O/compare_causal.json" > "$O/compare.txt" 2>&1
  echo "compare causal rc=$?"
  timeout 40 $C --non-causal --seqlens 16384 --json "$O/compare_noncausal.json" >> "$O/compare.txt" 2>&1
  echo "compare non-causal rc=$?"
  if [ $drc -eq 0 ]; then
    FLASHBOX_SM90_SCHED=dynamic timeout 60 $C --seqlens 2048,4096,8192,16384 >> "$O/compare.txt" 2>&1
    echo "compare causal dynamic rc=$?"
  fi
  grep -vE "^-+$" "$O/compare.txt"
fi

cuobjdump --dump-sass $D/libflashbox.so > /tmp/sass.txt 2>/dev/null
echo "SASS: HGMMA $(grep -c HGMMA /tmp/sass.txt), LDL $(grep -c 'LDL' /tmp/sass.txt), STL $(grep -c 'STL' /tmp/sass.txt)" | tee -a "$O/gpu.txt"
awk '/Function :/{f = ($3 ~ /flash_fwd_sm90/) ? $3 : ""} f != "" && $2 ~ /^(HGMMA|LDL|STL)/{c[substr(f,1,90)" "$2]++} END{for(k in c) print c[k], k}' /tmp/sass.txt | sort -k2 | head -40 >> "$O/gpu.txt"
