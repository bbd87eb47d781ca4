#!/usr/bin/env bash
# One device call for the Hopper forward: the sm90 tests and the team's GPU tests (tests/cuda, which
# dispatch impl = FLASH to sm90 on this GPU), compute-sanitizer on small shapes, the sm90_bench
# comparison of lazy and always-rescale (SM90_BENCH=full: the whole sweep), flashbox vs PyTorch SDPA in
# one process (bench/compare_sdpa.py), and a SASS summary. Runs prebuilt binaries carried from
# build-hopper (tests/sm90, tests/test_cuda, libflashbox.so); every step has its own time limit so a
# hang costs one step, not the call. Logs go to $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=build-hopper/tests/sm90
O=${OUT:-/tmp/sm90_out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$O/gpu.txt"

timeout 60 $B/test_sm90 > "$O/tests.log" 2>&1
echo "test_sm90 rc=$?"
if [ -x build-hopper/tests/test_cuda ]; then
  timeout 90 build-hopper/tests/test_cuda >> "$O/tests.log" 2>&1
  echo "test_cuda rc=$?"
fi
grep -E "^\[ +(OK|FAILED|PASSED) " "$O/tests.log" | grep -v "MatchesFp64" | tail -20; grep -E "Failure" -A4 "$O/tests.log" | head -40

timeout 90 compute-sanitizer --tool memcheck $B/test_sm90 --gtest_filter='Sm90.SmallShapes' > "$O/sanitizer.log" 2>&1
echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/sanitizer.log" | tail -3

BF="--final"; [ "${SM90_BENCH:-}" = full ] && BF=""
timeout 120 $B/sm90_bench $BF --json "$O/sm90_bench.json" > "$O/sm90_bench.txt" 2>&1
echo "bench rc=$?"; cat "$O/sm90_bench.txt"

# The team's yardstick: flashbox (sm90 forced) and PyTorch SDPA in one process.
C="python3 bench/compare_sdpa.py build-hopper/libflashbox.so --flash-arch sm90 --no-naive"
timeout 90 $C --seqlens 2048,4096,8192,16384 --json "$O/compare_sdpa.json" > "$O/compare_sdpa.txt" 2>&1
echo "compare causal rc=$?"
timeout 40 $C --non-causal --seqlens 16384 >> "$O/compare_sdpa.txt" 2>&1
grep -vE "^-+$" "$O/compare_sdpa.txt"

cuobjdump --dump-sass $B/test_sm90 > /tmp/sass.txt 2>/dev/null
echo "SASS: HGMMA $(grep -c HGMMA /tmp/sass.txt), LDL $(grep -c 'LDL' /tmp/sass.txt), STL $(grep -c 'STL' /tmp/sass.txt)" | tee -a "$O/gpu.txt"
awk '/Function :/{f = ($3 ~ /flash_fwd_sm90/) ? $3 : ""} f != "" && $2 ~ /^(HGMMA|LDL|STL)/{c[substr(f,1,90)" "$2]++} END{for(k in c) print c[k], k}' /tmp/sass.txt | sort -k2 | head -40 >> "$O/gpu.txt"
