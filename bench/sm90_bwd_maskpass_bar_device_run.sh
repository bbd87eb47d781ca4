#!/usr/bin/env bash
# One device call (2026-12-02): the sm90 backward's mask pass with the prepare kernel's fix for rows
# that see no key (ff5550f; bench/NOTES.md sm90 backward "the mask out of the loop"), against main's
# library without the pass (old/libflashbox.so), and issue 15's bar rows.
#   tests      test_backward's GPU tests, test_sm90_bwd_mods, _varlen, _pad_dims, _d96; compute-sanitizer
#              memcheck and racecheck on test_backward's small shapes
#   variants   sm90_bwd_variants.py new / old / cuDNN, one process, 5 rounds, B4 bf16, every bar row
#   bar        compare_sdpa.py --backward, causal T 1024 ... 16384 (the bar's one run)
#   prof       Nsight Compute, one launch of the main kernel each, d64 H12 and d128 H16, causal T 8192,
#              with the source page (bench/ncu_sass_mix.py reads it)
# Packing: OLD_LIB=<main's lib> PACK_NO_BUILD=1 bash bench/pack_final.sh .carry/lead/mask.tar.gz build-cuda \
#   flashbox test_backward test_sm90_bwd_mods test_sm90_bwd_varlen test_sm90_bwd_pad_dims test_sm90_bwd_d96
# Device call: run(command="bash bench/sm90_bwd_maskpass_bar_device_run.sh .carry/lead/mask.tar.gz 540",
#   carry=[".carry/lead"], timeout_s=570)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" maskbar "${3:-all}"
begin_call ${2:-540}
sh='Shapes/CudaBackwardShapes.BothModesMatchReference'
small="$sh/20:$sh/21:$sh/22:$sh/23:$sh/44:$sh/45:$sh/46:$sh/47:$sh/42:$sh/43:CudaBackward.EmptyRowsGiveZeroDq"
step test_backward timeout 110 env OMP_NUM_THREADS=14 $B/test_backward --gtest_brief=1 --gtest_filter='*Cuda*:BackwardApi.*'
for t in test_sm90_bwd_mods test_sm90_bwd_varlen test_sm90_bwd_pad_dims test_sm90_bwd_d96; do
  step $t timeout 40 $B/$t --gtest_brief=1
done
step memcheck timeout 35 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_backward --gtest_brief=1 --gtest_filter="$small"
step racecheck timeout 35 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_backward --gtest_brief=1 --gtest_filter="$small"
sv='64:12:1024:1,64:12:2048:1,64:12:4096:1,64:12:8192:1,64:12:16384:1,128:16:1024:1,128:16:2048:1,128:16:4096:1'
sv="$sv,128:16:8192:1,128:16:16384:1,128:16:16384:0,128:32:8192:1:8"
tstep variants 150 python3 "$here/sm90_bwd_variants.py" new=$B/libflashbox.so old=$B/old/libflashbox.so --rounds 5 \
  --shapes "$sv" --json "$O/variants.json"
bwd_bar 110
prof() {  # prof D H
  local r=/tmp/bwd_d$1
  timeout 80 ncu --clock-control none -k regex:flash_bwd_sm90_kernel -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section ComputeWorkloadAnalysis --section InstructionStats \
    --section MemoryWorkloadAnalysis -f -o $r $B/flashbox bench --device cuda --backward --impls flash \
    --seqlens 8192 --head-dim $1 --heads $2 --batch 4 --repeats 1 --warmup 0 || return 1
  timeout 15 ncu -i $r.ncu-rep --page details > "$O/ncu_details_d$1.txt"
  timeout 30 ncu -i $r.ncu-rep --page source --csv --print-source sass | gzip > "$O/src_bwd_d$1.csv.gz"
}
tstep prof_d128 100 bash -c "$(declare -f prof); B=$B O=$O prof 128 16"
tstep prof_d64 80 bash -c "$(declare -f prof); B=$B O=$O prof 64 12"
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|^D(64|128) " "$log" | tail -60
