#!/usr/bin/env bash
# One device call (2026-12-02): where the sm90 forward's softcap time goes, and main's backward tests.
#   tests    test_backward's GPU tests (the fp16 d128 backward on the DQLAG schedule since 2026-12-02
#            had run only through sm90_bwd_variants.py's gradient check)
#   ncu      Nsight Compute on one forward launch each (B4 bf16 causal T 8192, bench/fwd_mods_profile.py):
#            D128 H16 plain and softcap 30, D64 H12 plain and softcap 30; details, the raw pipe and issue
#            metrics (ncu_summary.txt) and each kernel's SASS with its per-instruction counts and stall
#            samples (src_*.csv.gz, the source page)
# Packing on the CPU machine: bash bench/pack_final.sh .carry/lead/fp.tar.gz build-cuda test_backward flashbox
# Device call: run(command="bash bench/fwd_mods_profile_device_run.sh .carry/lead/fp.tar.gz 290",
#   carry=[".carry/lead"], timeout_s=300)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" fwdprof "${3:-all}"
begin_call ${2:-290}
tests() {
  OMP_NUM_THREADS=14 timeout 120 $B/test_backward --gtest_brief=1 --gtest_filter='*Cuda*:BackwardApi.*' > "$O/tests.log" 2>&1
  local r=$?; echo "test_backward rc=$r: $(grep -E 'PASSED|FAILED' "$O/tests.log" | tr '\n' ' ')"; return $r
}
step tests tests
prof() {  # NAME D H VARIANT
  local lim
  lim=$(ncu_limit $1 60) || return 2
  timeout $lim ncu --clock-control none -k regex:flash_fwd_sm90_kernel --launch-skip 1 -c 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats \
    --section SourceCounters --section MemoryWorkloadAnalysis -f -o /tmp/fp_$1 \
    python3 "$here/fwd_mods_profile.py" $B/libflashbox.so --head-dim $2 --heads $3 --variant $4 --calls 2 || return 1
  ncu_summary /tmp/fp_$1.ncu-rep $1 "pipe, issue, inst" pipe issue inst_executed cycles_elapsed warps_active gmma
  timeout 30 ncu -i /tmp/fp_$1.ncu-rep --page source --csv --print-source sass | gzip > "$O/src_$1.csv.gz"
}
step ncu_d128_softcap prof d128_softcap 128 16 softcap30
step ncu_d128_plain prof d128_plain 128 16 plain
step ncu_d64_softcap prof d64_softcap 64 12 softcap30
step ncu_d64_plain prof d64_plain 64 12 plain
grep -E "^(==|rc=)|PASSED|FAILED|kernel" "$log" | tail -40
