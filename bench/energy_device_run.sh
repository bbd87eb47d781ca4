#!/usr/bin/env bash
# Energy per backward call under the power cap (bench/energy_per_call.py: NVML's energy counter,
# flashbox and cuDNN interleaved, a dense matmul as the per-FLOP reference), then issue 15's bar
# (compare_sdpa.py --backward, T 1024-16384) on the same library.
#   bench/energy_device_run.sh TARBALL [ROUNDS (3)]
set -u
. "$(dirname "$0")/device_steps.sh" "$1" energy all
begin_call 420
tstep energy 240 python3 bench/energy_per_call.py $B/libflashbox.so --rounds ${2:-3} \
  --cases 128:16:16384:1,64:12:16384:1,128:16:4096:1 --json "$O/energy.json"
bwd_bar 150
grep -E "round|median|matmul|rel error" "$log"
