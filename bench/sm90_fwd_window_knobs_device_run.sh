#!/usr/bin/env bash
# One device call (2026-12-02): the sm90 forward's sliding-window rows under its run-time knobs, no
# rebuild (bench/sm90_window_ab.py, one library loaded once per setting, interleaved, 3 rounds, B4
# bf16, W 1024, T 4096 and 16384): the defaults; FLASHBOX_SM90_TILE=128x128 (d64 on the two-group
# tile; d128's default anyway); FLASHBOX_SM90_SCHED=grid (one CTA per tile); FLASHBOX_SM90_L2MB=8 and
# =32 (K/V per L2 section of the persistent order; d128's default is one head per section).
# Packing: the library alone, .carry/lead/knobs.tar.gz. Device call:
#   run(command="bash bench/sm90_fwd_window_knobs_device_run.sh .carry/lead/knobs.tar.gz 200",
#       carry=[".carry/lead"], timeout_s=220)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" knobs all
begin_call ${2:-200}
L=$B/libflashbox.so
tstep ab 190 python3 "$here/sm90_window_ab.py" base=$L t128=$L:FLASHBOX_SM90_TILE=128x128 grid=$L:FLASHBOX_SM90_SCHED=grid \
  l2_8=$L:FLASHBOX_SM90_L2MB=8 l2_32=$L:FLASHBOX_SM90_L2MB=32 --configs 64:12,128:16 --seqlens 4096,16384 \
  --windows 1024 --rounds 3 --json "$O/window_knobs.json"
grep -E "^D(64|128) |ERROR" "$log" | sed 's/ | base:.*//'
