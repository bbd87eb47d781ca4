#!/usr/bin/env bash
# One device call (2026-12-02): the sm90 backward's descriptors in uniform registers (bench/NOTES.md
# sm90 backward "warp-uniform warpgroup index, shared-memory pointer"):
#   base = main after the mask pass (9deef94), uni = the warpgroup index broadcast by __shfl_sync,
#   ptr = uni + the 1024-B alignment of the dynamic shared memory as an offset (LDS, not LD).
#   tests      ptr's test_backward GPU tests, test_sm90_bwd_mods, _varlen, _pad_dims, _d96, memcheck and racecheck
#   variants   sm90_bwd_variants.py ptr / uni / base / cuDNN, one process, 5 rounds, B4 bf16
#   sass       where each build's d64 / d128 kernels spill (STL / LDL) and how many R2UR, LD, LDS they hold
#   prof_d128  Nsight Compute on ptr's d128 main kernel (B4 H16 causal T 8192) with its source page
# Packing: PACK_NO_BUILD=1 bash bench/pack_final.sh of ptr's build (flashbox and the five suites), then base/ and uni/
#   libflashbox.so added to the tarball.
# Device call: run(command="bash bench/sm90_bwd_uniform_device_run.sh .carry/lead/uni.tar.gz 400",
#   carry=[".carry/lead"], timeout_s=430)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" uni "${3:-all}"
begin_call ${2:-400}
sh='Shapes/CudaBackwardShapes.BothModesMatchReference'
small="$sh/20:$sh/21:$sh/22:$sh/23:$sh/44:$sh/45:$sh/46:$sh/47:$sh/42:$sh/43:CudaBackward.EmptyRowsGiveZeroDq"
sv='64:12:2048:1,64:12:4096:1,64:12:16384:1,128:16:2048:1,128:16:4096:1,128:16:8192:1,128:16:16384:1,128:16:16384:0,128:32:8192:1:8'
tstep variants 130 python3 "$here/sm90_bwd_variants.py" ptr=$B/libflashbox.so uni=$B/uni/libflashbox.so \
  base=$B/base/libflashbox.so --rounds 5 --shapes "$sv" --json "$O/variants.json"
sass() {
  for b in ptr=$B/libflashbox.so uni=$B/uni/libflashbox.so base=$B/base/libflashbox.so; do
    cuobjdump -sass ${b#*=} > /tmp/sass_${b%%=*}.txt || return 1
    python3 - /tmp/sass_${b%%=*}.txt ${b%%=*} <<'PY'
import re, sys
name, cur, stats = sys.argv[2], None, {}
for line in open(sys.argv[1]):
    m = re.match(r"\s+Function : (\S+)", line)
    if m:
        cur = m.group(1); stats[cur] = dict(n=0, STL=0, LDL=0, R2UR=0, LD=0, LDS=0); continue
    if cur is None or "/*" not in line: continue
    op = re.search(r"\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
    if not op: continue
    o = op.group(2); st = stats[cur]; st["n"] += 1
    if o in st: st[o] += 1
for f, st in stats.items():
    if "flash_bwd_sm90_kernel" in f and ("Li128ELi64ELb0ELb1E" in f or "Li64ELi128ELb0ELb0E" in f):
        print(name, f[-60:], st)
PY
  done
}
step sass sass
step test_backward timeout 110 env OMP_NUM_THREADS=14 $B/test_backward --gtest_brief=1 --gtest_filter='*Cuda*:BackwardApi.*'
for t in test_sm90_bwd_mods test_sm90_bwd_varlen test_sm90_bwd_pad_dims test_sm90_bwd_d96; do
  step $t timeout 40 $B/$t --gtest_brief=1
done
step memcheck timeout 35 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_backward --gtest_brief=1 --gtest_filter="$small"
step racecheck timeout 35 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_backward --gtest_brief=1 --gtest_filter="$small"
prof() {
  timeout 80 ncu --clock-control none -k regex:flash_bwd_sm90_kernel -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section InstructionStats -f -o /tmp/bwd_d128 \
    $B/flashbox bench --device cuda --backward --impls flash --seqlens 8192 --head-dim 128 --heads 16 --batch 4 \
    --repeats 1 --warmup 0 || return 1
  timeout 15 ncu -i /tmp/bwd_d128.ncu-rep --page details > "$O/ncu_details_d128.txt"
  timeout 30 ncu -i /tmp/bwd_d128.ncu-rep --page source --csv --print-source sass | gzip > "$O/src_bwd_d128.csv.gz"
}
tstep prof_d128 60 bash -c "$(declare -f prof); B=$B O=$O prof"
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|^D(64|128) |^(ptr|uni|base) " "$log" | tail -70
