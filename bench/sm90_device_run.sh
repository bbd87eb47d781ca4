#!/usr/bin/env bash
# One device call for the Hopper forward: tests, compute-sanitizer on small shapes, the timing sweep,
# SDPA on the same shapes, and a SASS summary. Runs prebuilt binaries from build-hopper (carried:
# build-hopper/tests/sm90 and build-hopper/libflashbox.so);
# every step has its own time limit so a hang costs one step, not the call. Logs go to $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=build-hopper/tests/sm90
O=${OUT:-/tmp/sm90_out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$O/gpu.txt"

timeout 60 $B/test_sm90 --gtest_filter='Sm90.SmallShapes:Sm90.SupportsGivesReasons' > "$O/tests.log" 2>&1
rc=$?
tail -4 "$O/tests.log"; echo "small tests rc=$rc"
if [ $rc -eq 124 ]; then
  echo "HANG in small tests: trying the serial main loop"
  FLASHBOX_SM90_MODE=serial timeout 30 $B/test_sm90 --gtest_filter='Sm90.SmallShapes' 2>&1 | tail -15
  exit 1
fi
timeout 90 $B/test_sm90 --gtest_filter='-Sm90.SmallShapes:Sm90.Persistent*' >> "$O/tests.log" 2>&1
echo "other tests rc=$?"
timeout 45 $B/test_sm90 --gtest_filter='Sm90.Persistent*' >> "$O/tests.log" 2>&1
prc=$?; echo "persistent tests rc=$prc"; NOPERS=""; [ $prc -ne 0 ] && NOPERS="--no-persistent"
grep -E "^\[ +(OK|FAILED|PASSED) " "$O/tests.log" | head -30
grep -E "Failure" -A4 "$O/tests.log" | head -40

timeout 90 compute-sanitizer --tool memcheck $B/test_sm90 --gtest_filter='Sm90.SmallShapes' > "$O/sanitizer.log" 2>&1
echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/sanitizer.log" | tail -3

timeout 120 $B/sm90_bench $NOPERS --json "$O/sm90_bench.json" > "$O/sm90_bench.txt" 2>&1
echo "bench rc=$?"; cat "$O/sm90_bench.txt"
# The team's yardstick: flashbox (sm90 forced) and PyTorch SDPA in one process (bench/compare_sdpa.py);
# bench/sm90_sdpa.py times SDPA alone if that script cannot run here.
C="python3 bench/compare_sdpa.py build-hopper/libflashbox.so --flash-arch sm90 --no-naive"
timeout 120 $C --seqlens 2048,4096,8192,16384 --json "$O/compare_sdpa.json" > "$O/compare_sdpa.txt" 2>&1
rc=$?
timeout 60 $C --non-causal --seqlens 16384 >> "$O/compare_sdpa.txt" 2>&1
echo "compare_sdpa rc=$rc,$?"; cat "$O/compare_sdpa.txt"
if [ $rc -ne 0 ]; then timeout 150 python3 bench/sm90_sdpa.py >> "$O/compare_sdpa.txt" 2>&1; tail -25 "$O/compare_sdpa.txt"; fi

cuobjdump --dump-sass $B/test_sm90 > /tmp/sass.txt 2>/dev/null
echo "SASS: HGMMA $(grep -c HGMMA /tmp/sass.txt), LDL $(grep -c 'LDL' /tmp/sass.txt), STL $(grep -c 'STL' /tmp/sass.txt)" | tee -a "$O/gpu.txt"
# The main-loop SASS of the bf16 head_dim-128 128x128 kernel, for reading offline.
awk '/Function :/{on = ($3 ~ /Li128ELi128ELi2ELi2E/ && $3 ~ /bfloat16/)} on' /tmp/sass.txt > "$O/sass_d128.txt"
awk '/Function :/{f = ($3 ~ /flash_fwd_sm90/) ? $3 : ""} f != "" && $2 ~ /^(HGMMA|LDL|STL)/{c[substr(f,1,90)" "$2]++} END{for(k in c) print c[k], k}' /tmp/sass.txt | sort -k2 | head -40 >> "$O/gpu.txt"
