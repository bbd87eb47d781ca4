#!/usr/bin/env bash
# One device call for branch sprefetch (bench/NOTES.md, sm90 backward "(branch sprefetch ...)"): the
# bf16 d128 DQLAG kernel with a step's S^T and dP^T issued before the wait for the previous step's dK
# (Cfg::NEXT_SDP) against main's library (old/libflashbox.so, c4ebd64).
#   tests      test_backward's GPU tests (10 threads) beside test_sm90_bwd_mods, _varlen, _pad_dims and
#              compute-sanitizer memcheck and racecheck on test_backward's small shapes (d128 20-23,
#              44-47: 129 and 333 x 200 tokens, GQA 4/1; d64 42, 43), each under its own timeout
#   variants   bench/sm90_bwd_variants.py new / old / cuDNN, one process, 5 rounds, B4 bf16: D128 causal
#              T 2048, 8192, 16384, non-causal 16384, GQA 32/8 8192; D64 causal 16384 (unchanged kernel)
#   ncu        Nsight Compute on the new library's D128 causal main kernel at T 8192 (B4 H16)
# Logs: run.log, tests.log (every suite's and sanitizer's log, concatenated), variants.json, ncu_*:
# six files (the device returns at most ~8).
# Packing, on the CPU machine (the device runs in a copy of /work/main: the carry goes under its
# .carry/, git-ignored there):
#   bash bench/sm90_bwd_sprefetch_device_run.sh --pack /work/main/.carry/sprefetch/sp.tar.gz OLD build-cuda
#   cp bench/sm90_bwd_sprefetch_device_run.sh bench/device_steps.sh bench/sm90_bwd_variants.py \
#     bench/compare_sdpa.py /work/main/.carry/sprefetch/
# Device call: run(command="bash .carry/sprefetch/sm90_bwd_sprefetch_device_run.sh .carry/sprefetch/sp.tar.gz 205",
#   carry=[".carry/sprefetch"], timeout_s=220)
# It ran once, at e309d82 (bench/results/2026-12-02_sm90_bwd_sprefetch/, 107 s; 6 files came back).
# The kernel change it measured is gone (within noise); a rerun needs that commit's tree.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--pack" ]; then
  OLD_LIB=$3 exec bash "$here/pack_final.sh" "$2" "${4:-build-cuda}" test_backward test_sm90_bwd_mods \
    test_sm90_bwd_varlen test_sm90_bwd_pad_dims flashbox
fi
. "$here/device_steps.sh" "$1" sprefetch "${3:-all}"
begin_call ${2:-205}
gpu='*Cuda*:BackwardApi.*'
sh='Shapes/CudaBackwardShapes.BothModesMatchReference'
small="$sh/20:$sh/21:$sh/22:$sh/23:$sh/44:$sh/45:$sh/46:$sh/47:$sh/42:$sh/43:CudaBackward.EmptyRowsGiveZeroDq"
T=/tmp/sprefetch_logs; mkdir -p $T
tests() {
  local lim=$(( DEADLINE - $(date +%s) - 110 )) worst=0 r
  (( lim > 95 )) && lim=95
  OMP_NUM_THREADS=10 timeout $lim $B/test_backward --gtest_brief=1 --gtest_filter="$gpu" > "$T/test_backward.log" 2>&1 &
  local a=$!
  for t in test_sm90_bwd_mods test_sm90_bwd_varlen test_sm90_bwd_pad_dims; do
    OMP_NUM_THREADS=6 timeout 40 $B/$t --gtest_brief=1 > "$T/$t.log" 2>&1; r=$?
    echo "$t rc=$r: $(grep -E 'PASSED|FAILED' "$T/$t.log" | tr '\n' ' ')"; (( r > worst )) && worst=$r
  done
  for tool in memcheck racecheck; do
    OMP_NUM_THREADS=6 timeout 35 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_backward --gtest_brief=1 \
      --gtest_filter="$small" > "$T/$tool.log" 2>&1; r=$?
    echo "$tool rc=$r: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$T/$tool.log" | tr '\n' ' ')"
    (( r > worst )) && worst=$r
  done
  wait $a; r=$?
  echo "test_backward rc=$r: $(grep -E 'PASSED|FAILED' "$T/test_backward.log" | tr '\n' ' ')"
  (( r > worst )) && worst=$r
  for f in test_backward test_sm90_bwd_mods test_sm90_bwd_varlen test_sm90_bwd_pad_dims memcheck racecheck; do
    echo "######## $f.log"; cat "$T/$f.log"
  done > "$O/tests.log"
  return $worst
}
step tests tests
sv='128:16:2048:1,128:16:8192:1,128:16:16384:1,128:16:16384:0,128:32:8192:1:8,64:12:16384:1'
tstep variants 75 python3 "$here/sm90_bwd_variants.py" new=$B/libflashbox.so old=$B/old/libflashbox.so --rounds 5 \
  --shapes "$sv" --json "$O/variants.json"
prof() {
  local lim=$(( DEADLINE - $(date +%s) - 8 ))
  (( lim >= 10 )) || { echo "ncu: no time left"; return 2; }
  timeout $lim ncu --clock-control none -k regex:flash_bwd_sm90_kernel -c 1 --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis -f -o /tmp/sprefetch_d128 $B/flashbox bench --device cuda --backward --impls flash \
    --seqlens 8192 --head-dim 128 --heads 16 --batch 4 --repeats 1 --warmup 0 || return 1
  timeout 10 ncu -i /tmp/sprefetch_d128.ncu-rep --page details > "$O/ncu_details.txt"
  timeout 20 ncu -i /tmp/sprefetch_d128.ncu-rep --page source --csv --print-source sass > /tmp/sprefetch_src.csv
  python3 - /tmp/sprefetch_src.csv "$O" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
h, body = rows[0], rows[1:]
num = lambda x: float(x.replace(",", "") or 0) if x.replace(",", "").replace(".", "", 1).isdigit() else 0.0
key = next((i for i, c in enumerate(h) if c.startswith("Warp Stall Sampling (All")), None)
body.sort(key=lambda r: -num(r[key]) if key is not None else 0)
with open(sys.argv[2] + "/ncu_top_stalls.csv", "w", newline="") as f:
    csv.writer(f).writerows([h] + body[:60])
with open(sys.argv[2] + "/ncu_stall_reasons.txt", "w") as f:
    for i, c in enumerate(h):
        s = sum(num(r[i]) for r in body)
        if s and ("stall" in c.lower() or "sampl" in c.lower() or "executed" in c.lower()):
            f.write(f"{s:14.0f}  {c}\n")
print("lines", len(body), "top", h[key] if key is not None else None)
PY
}
step ncu prof
grep -E "^(==|rc=)|^D(64|128) |ERROR|FAILED|PASSED|ERROR SUMMARY|RACECHECK SUMMARY|rc=" "$log" | tail -60
