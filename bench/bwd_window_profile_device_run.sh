#!/usr/bin/env bash
# One device call (2026-12-03): Nsight Compute on the sm90 backward's main kernel, a W1024 causal
# window against its same-work plain peer (bench/bwd_phase_profile.py's cases: B4 bf16, D128 H16 T 16384
# window (1024, 0) and T 5696 causal; D64 H12 the same), one launch each after the warm-up calls:
# details (speed of light, occupancy, launch and warp-state statistics) and the raw pipe/issue metrics
# into ncu_summary.txt.
#   bench/bwd_window_profile_device_run.sh TARBALL [SECONDS (240)]
# TARBALL: a library (pack_final.sh, or libflashbox.so and lib/ in one .tar.xz).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" bwdwinprof all
begin_call ${2:-240}
prof() {  # NAME CONFIG CASE
  local lim
  lim=$(ncu_limit $1 70) || return 2
  timeout $lim ncu --clock-control none -k regex:flash_bwd_sm90_kernel --launch-skip 3 -c 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis -f -o /tmp/bw_$1 \
    python3 "$here/bwd_phase_profile.py" $B/libflashbox.so --configs $2 --only $3 --causal-only --no-profiler --calls 1 \
    || return 1
  ncu_summary /tmp/bw_$1.ncu-rep $1 "pipe, issue, waves, cycles" pipe_tensor issue_active cycles_elapsed cycles_active \
    waves gmma dram__bytes lts__t_bytes
}
step d128_window prof d128_window 128:16 window
step d128_peer prof d128_peer 128:16 same_work
step d64_window prof d64_window 64:12 window
step d64_peer prof d64_peer 64:12 same_work
grep -E "^######## .* details|Duration|Compute \(SM\) Throughput|Memory Throughput|Waves Per SM|Achieved Occupancy|Issue Slots Busy|No Eligible|Eligible Warps|pipe_tensor.*pct|cycles_active.avg |cycles_elapsed.avg |dram__bytes_read.sum |dram__bytes_write.sum " "$O/ncu_summary.txt" | head -120
