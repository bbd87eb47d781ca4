#!/usr/bin/env bash
# One device call (2026-12-02): the sm90 forward's shared-memory alignment as a pointer offset (as the
# backward's, bench/NOTES.md sm90 backward "warp-uniform warpgroup index, shared-memory pointer"),
# against the library without it (old/: main at 71fedec), and the check of the whole build:
#   bar          compare_sdpa.py --backward, causal T 1024 ... 16384 (issue 15's one run)
#   fwd_mods     sm90_window_ab.py new / old --mods (plain, softcap 30, ALiBi), T 4096 and 16384, 3 rounds
#   fwd_windows  sm90_window_ab.py new / old, W 1024 and their same-work plain rows, T 16384, 3 rounds
#   det          sm90_bwd_variants.py new with and without deterministic = 1, cuDNN, 3 rounds; 50-run repeat check
#   then bench/device_final_run.sh's test suites, sanitizers and compare_sdpa runs (forward, backward)
# Packing: OLD_LIB=<main 71fedec lib> PACK_NO_BUILD=1 bash bench/pack_final.sh /tmp/check.tar.gz build-cuda \
#   flashbox test_backward test_cuda test_sm90 test_sm90_mods test_sm90_bwd_mods test_sm90_bwd_d256 test_sm90_bwd_d192 \
#   test_sm90_bwd_d96 test_sm90_bwd_pad_dims test_sm90_varlen test_sm90_bwd_varlen
#   (69 MB: over the carry limit), its contents stripped (strip --strip-unneeded) and re-packed as one xz stream
#   (tar -cf - | xz -T2 -9 > .carry/lead/check.tar.xz: 12 MB; device_steps.sh reads either).
# Device call: run(command="bash bench/sm90_ptr_check_device_run.sh .carry/lead/check.tar.xz 560", carry=[".carry/lead"],
#   timeout_s=590)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" ptrcheck all
begin_call ${2:-560}
bwd_bar 40
tstep fwd_mods 70 python3 "$here/sm90_window_ab.py" new=$B/libflashbox.so old=$B/old/libflashbox.so --mods \
  --seqlens 4096,16384 --rounds 3 --json "$O/fwd_mods.json"
tstep fwd_windows 60 python3 "$here/sm90_window_ab.py" new=$B/libflashbox.so old=$B/old/libflashbox.so \
  --seqlens 16384 --rounds 3 --json "$O/fwd_windows.json"
tstep det 80 python3 "$here/sm90_bwd_variants.py" new=$B/libflashbox.so --det new --rounds 3 \
  --shapes 64:12:2048:1,64:12:16384:1,128:16:2048:1,128:16:16384:1,128:16:16384:0 --json "$O/det.json"
final_suites compare_fwd,compare_fwd_noncausal
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|^D(64|128) |^ *(64|128) " "$log" | tail -90
