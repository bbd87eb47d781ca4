#!/usr/bin/env bash
# One device call (2026-12-02): Nsight Compute on the sm90 backward's main kernel at head_dim 64 (B4 H12
# causal T 8192, `flashbox bench --backward`), the sections of the d128 profile in
# bench/results/2026-12-02_sm90_bwd_sprefetch plus the raw pipe metrics and the source page (SASS with
# per-instruction counts and stall samples; bench/ncu_sass_mix.py reads it).
# Packing: PACK_NO_BUILD=1 bash bench/pack_final.sh .carry/lead/bprof.tar.gz build-cuda flashbox
# Device call: run(command="bash bench/sm90_bwd_d64_profile_device_run.sh .carry/lead/bprof.tar.gz 150",
#   carry=[".carry/lead"], timeout_s=170)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" bprof all
begin_call ${2:-150}
prof() {
  timeout 100 ncu --clock-control none -k regex:flash_bwd_sm90_kernel -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section ComputeWorkloadAnalysis --section InstructionStats \
    --section MemoryWorkloadAnalysis -f -o /tmp/bwd_d64 $B/flashbox bench --device cuda --backward --impls flash \
    --seqlens 8192 --head-dim 64 --heads 12 --batch 4 --repeats 1 --warmup 0 || return 1
  timeout 15 ncu -i /tmp/bwd_d64.ncu-rep --page details > "$O/ncu_details_d64.txt"
  ncu_raw /tmp/bwd_d64.ncu-rep pipe issue inst_executed.sum cycles_elapsed.avg gmma lts__t_bytes l1tex__data_pipe \
    > "$O/ncu_raw_d64.txt"
  timeout 30 ncu -i /tmp/bwd_d64.ncu-rep --page source --csv --print-source sass | gzip > "$O/src_bwd_d64.csv.gz"
}
step ncu prof
grep -E "^(==|rc=)" "$log"
