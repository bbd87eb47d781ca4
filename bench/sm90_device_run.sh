#!/usr/bin/env bash
# One device call for the Hopper forward: tests, compute-sanitizer on small shapes, the timing sweep,
# SDPA on the same shapes, and a SASS summary. Runs prebuilt binaries from build-hopper (carried);
# every step has its own time limit so a hang costs one step, not the call. Logs go to $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=build-hopper/tests/sm90
O=${OUT:-/tmp/sm90_out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$O/gpu.txt"

timeout 60 $B/test_sm90 --gtest_filter='Sm90.SmallShapes:Sm90.SupportsGivesReasons' > "$O/test_small.log" 2>&1
rc=$?
tail -4 "$O/test_small.log"; echo "small tests rc=$rc"
if [ $rc -eq 124 ]; then
  echo "HANG in small tests: trying the serial main loop"
  FLASHBOX_SM90_MODE=serial timeout 30 $B/test_sm90 --gtest_filter='Sm90.SmallShapes' 2>&1 | tail -15
  exit 1
fi
timeout 240 $B/test_sm90 --gtest_filter='-Sm90.SmallShapes' > "$O/test_all.log" 2>&1
echo "other tests rc=$?"; grep -E "^\[  (FAILED|PASSED) |Failure|rel|max abs" "$O/test_all.log" | head -30
grep -E "Failure|FAILED" -A3 "$O/test_small.log" | head -30

timeout 150 compute-sanitizer --tool memcheck $B/test_sm90 --gtest_filter='Sm90.SmallShapes' > "$O/sanitizer.log" 2>&1
echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/sanitizer.log" | tail -3

timeout 150 $B/sm90_bench --json "$O/sm90_bench.json" > "$O/sm90_bench.txt" 2>&1
echo "bench rc=$?"; cat "$O/sm90_bench.txt"
timeout 150 python3 bench/sm90_sdpa.py --json "$O/sdpa.json" > "$O/sdpa.txt" 2>&1
echo "sdpa rc=$?"; cat "$O/sdpa.txt"

cuobjdump --dump-sass $B/test_sm90 > /tmp/sass.txt 2>/dev/null
echo "SASS: HGMMA $(grep -c HGMMA /tmp/sass.txt), LDL $(grep -c 'LDL' /tmp/sass.txt), STL $(grep -c 'STL' /tmp/sass.txt)" | tee -a "$O/gpu.txt"
awk '/Function :/{f = ($3 ~ /flash_fwd_sm90/) ? $3 : ""} f != "" && $2 ~ /^(HGMMA|LDL|STL)/{c[substr(f,1,90)" "$2]++} END{for(k in c) print c[k], k}' /tmp/sass.txt | sort -k2 | head -40 >> "$O/gpu.txt"
