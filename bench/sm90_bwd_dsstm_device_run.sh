#!/usr/bin/env bash
# One device call for branch dsstm (bench/NOTES.md, sm90 backward "(branch dsstm ...)"): the dS^T
# stores into shared memory as stmatrix (Cfg::DS_STMATRIX: d64 and d128 both types, d96, the d128
# QDESC kernel) against the st.shared.b32 loop (old/libflashbox.so: the same tree before the change).
#   tests      test_backward's GPU tests (10 threads) beside test_sm90_bwd_mods, _d96, _pad_dims and
#              compute-sanitizer memcheck and racecheck on test_backward's small shapes (6 threads),
#              logs test_*.log, memcheck.log, racecheck.log
#   variants   bench/sm90_bwd_variants.py new / old / cuDNN, one process, 5 rounds, B4 bf16: causal
#              D64 H12 and D128 H16 at T 2048, 8192, 16384, non-causal D128 16384
#   ncu        Nsight Compute on the new library's D128 causal main kernel at T 8192 (B4 H16, the
#              flashbox CLI): the section summaries (ncu_details.txt), the 60 SASS lines with the
#              most stall samples (ncu_top_stalls.csv) and the samples by reason (ncu_stall_reasons.txt)
# Packing, on the CPU machine (the device runs in a copy of /work/main, so the carry goes under its
# .carry/, which git ignores there; OLD the library built before the change):
#   bash bench/sm90_bwd_dsstm_device_run.sh --pack /work/main/.carry/dsstm/dsstm.tar.gz OLD build-cuda
#   cp bench/sm90_bwd_dsstm_device_run.sh bench/device_steps.sh bench/sm90_bwd_variants.py \
#     bench/compare_sdpa.py /work/main/.carry/dsstm/
# Device call: run(command="bash .carry/dsstm/sm90_bwd_dsstm_device_run.sh .carry/dsstm/dsstm.tar.gz 192",
#   carry=[".carry/dsstm"], timeout_s=200)
#   bash bench/sm90_bwd_dsstm_device_run.sh TARBALL [SECONDS] [STEP,STEP,...]
# It ran once, at 8ce7d9f (bench/results/2026-12-02_sm90_bwd_dsstm/, 106 s). The device returned 8 of
# the 11 files it leaves under $OUT (variants.json, the mods and pad_dims logs stayed behind): a rerun
# should pack them into fewer.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--pack" ]; then
  OLD_LIB=$3 exec bash "$here/pack_final.sh" "$2" "${4:-build-cuda}" test_backward test_sm90_bwd_mods \
    test_sm90_bwd_d96 test_sm90_bwd_pad_dims flashbox
fi
. "$here/device_steps.sh" "$1" dsstm "${3:-all}"
begin_call ${2:-192}
gpu='*Cuda*:BackwardApi.*'
shapes='Shapes/CudaBackwardShapes.BothModesMatchReference'
small="$shapes/22:$shapes/23:$shapes/42:$shapes/43:CudaBackward.EmptyRowsGiveZeroDq"
# test_backward beside the other suites and the sanitizers (mostly fp64 references on the CPU); each
# under its own timeout; the step's rc is the worst.
tests() {
  local lim=$(( DEADLINE - $(date +%s) - 97 )) worst=0 r
  (( lim > 95 )) && lim=95
  OMP_NUM_THREADS=10 timeout $lim $B/test_backward --gtest_brief=1 --gtest_filter="$gpu" > "$O/test_backward.log" 2>&1 &
  local a=$!
  for t in test_sm90_bwd_mods test_sm90_bwd_d96 test_sm90_bwd_pad_dims; do
    OMP_NUM_THREADS=6 timeout 40 $B/$t --gtest_brief=1 > "$O/$t.log" 2>&1; r=$?
    echo "$t rc=$r: $(grep -E 'PASSED|FAILED' "$O/$t.log" | tr '\n' ' ')"; (( r > worst )) && worst=$r
  done
  for tool in memcheck racecheck; do
    OMP_NUM_THREADS=6 timeout 25 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_backward --gtest_brief=1 \
      --gtest_filter="$small" > "$O/$tool.log" 2>&1; r=$?
    echo "$tool rc=$r: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$O/$tool.log" | tr '\n' ' ')"
    (( r > worst )) && worst=$r
  done
  wait $a; r=$?
  echo "test_backward rc=$r: $(grep -E 'PASSED|FAILED' "$O/test_backward.log" | tr '\n' ' ')"
  (( r > worst )) && worst=$r
  return $worst
}
step tests tests
sv='64:12:2048:1,64:12:8192:1,64:12:16384:1,128:16:2048:1,128:16:8192:1,128:16:16384:1,128:16:16384:0'
tstep variants 60 python3 "$here/sm90_bwd_variants.py" new=$B/libflashbox.so old=$B/old/libflashbox.so --rounds 5 \
  --shapes "$sv" --json "$O/variants.json"
prof() {
  local lim=$(( DEADLINE - $(date +%s) - 8 ))
  (( lim >= 10 )) || { echo "ncu: no time left"; return 2; }
  timeout $lim ncu --clock-control none -k regex:flash_bwd_sm90_kernel -c 1 --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis -f -o /tmp/dsstm_d128 $B/flashbox bench --device cuda --backward --impls flash \
    --seqlens 8192 --head-dim 128 --heads 16 --batch 4 --repeats 1 --warmup 0 || return 1
  timeout 10 ncu -i /tmp/dsstm_d128.ncu-rep --page details > "$O/ncu_details.txt"
  timeout 20 ncu -i /tmp/dsstm_d128.ncu-rep --page source --csv --print-source sass > /tmp/dsstm_src.csv
  python3 - /tmp/dsstm_src.csv "$O" <<'PY'
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
