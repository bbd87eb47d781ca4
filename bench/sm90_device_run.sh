#!/usr/bin/env bash
# One device call for the Hopper forward: the sm90 tests, compute-sanitizer on small shapes (one tile
# per CTA and persistent), the sm90_bench comparison of schedules and rescaling, flashbox vs PyTorch
# SDPA in one process (bench/compare_sdpa.py) for the defaults and for persistent + lazy rescaling,
# and a SASS summary. Runs prebuilt binaries carried from build-hopper (tests/sm90, libflashbox.so); every step
# has its own time limit so that a hang costs one step, not the call. Logs go to $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=build-hopper/tests/sm90
O=${OUT:-/tmp/sm90_out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$O/gpu.txt"

timeout 60 $B/test_sm90 --gtest_filter='-Sm90.Persistent*' > "$O/tests.log" 2>&1
echo "tests rc=$?"
timeout 40 $B/test_sm90 --gtest_filter='Sm90.Persistent*' >> "$O/tests.log" 2>&1
prc=$?; echo "persistent tests rc=$prc"
grep -E "^\[ +(OK|FAILED|PASSED) " "$O/tests.log"; grep -E "Failure" -A4 "$O/tests.log" | head -40

# The team's GPU tests (tests/cuda), where impl = FLASH on this GPU dispatches to the sm90 kernel.
if [ -x build-hopper/tests/test_cuda ]; then
  timeout 90 build-hopper/tests/test_cuda >> "$O/tests.log" 2>&1
  echo "test_cuda rc=$?"; grep -E "^\[  (PASSED|FAILED) |tests? ran" "$O/tests.log" | tail -4
fi

F='Sm90.SmallShapes'; [ $prc -eq 0 ] && F="$F:Sm90.Persistent*"
timeout 90 compute-sanitizer --tool memcheck $B/test_sm90 --gtest_filter="$F" > "$O/sanitizer.log" 2>&1
echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/sanitizer.log" | tail -3

# Schedule x rescale on the key shapes (--final); SM90_BENCH=full runs the whole sweep instead.
BF="--final"; [ "${SM90_BENCH:-}" = full ] && BF=""; [ $prc -ne 0 ] && BF="$BF --no-persistent"
timeout 90 $B/sm90_bench $BF --json "$O/sm90_bench.json" > "$O/sm90_bench.txt" 2>&1
echo "bench rc=$?"; cat "$O/sm90_bench.txt"

# The team's yardstick: flashbox (sm90 forced) and PyTorch SDPA in one process.
C="python3 bench/compare_sdpa.py build-hopper/libflashbox.so --flash-arch sm90 --no-naive"
timeout 90 $C --seqlens 2048,4096,8192,16384 --json "$O/compare_sdpa.json" > "$O/compare_sdpa.txt" 2>&1
echo "compare causal rc=$?"
timeout 40 $C --non-causal --seqlens 16384 >> "$O/compare_sdpa.txt" 2>&1
if [ $prc -eq 0 ]; then
  export FLASHBOX_SM90_SCHED=persistent FLASHBOX_SM90_RESCALE=lazy
  timeout 90 $C --seqlens 2048,4096,8192,16384 --json "$O/compare_sdpa_persistent.json" \
    >> "$O/compare_sdpa.txt" 2>&1
  echo "compare persistent rc=$?"
  timeout 40 $C --non-causal --seqlens 16384 >> "$O/compare_sdpa.txt" 2>&1
  unset FLASHBOX_SM90_SCHED FLASHBOX_SM90_RESCALE
fi
grep -vE "^-+$" "$O/compare_sdpa.txt"

cuobjdump --dump-sass $B/test_sm90 > /tmp/sass.txt 2>/dev/null
echo "SASS: HGMMA $(grep -c HGMMA /tmp/sass.txt), LDL $(grep -c 'LDL' /tmp/sass.txt), STL $(grep -c 'STL' /tmp/sass.txt)" | tee -a "$O/gpu.txt"
awk '/Function :/{f = ($3 ~ /flash_fwd_sm90/) ? $3 : ""} f != "" && $2 ~ /^(HGMMA|LDL|STL)/{c[substr(f,1,90)" "$2]++} END{for(k in c) print c[k], k}' /tmp/sass.txt | sort -k2 | head -40 >> "$O/gpu.txt"
