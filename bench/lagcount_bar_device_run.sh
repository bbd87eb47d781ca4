#!/usr/bin/env bash
# The one-step-late early-convert count (branch lagcount) on the H200 in one call, for a day when the
# device is scarce: its A/B against main (old/) in one process, issue 15's bar on it, the backward
# suites and compute-sanitizer on small shapes (memcheck; racecheck of the non-deterministic path the
# change touches).
#   bench/lagcount_bar_device_run.sh TARBALL [SECONDS (590)]
# TARBALL: bench/bwd_bar_check_device_run.sh's binaries with OLD_LIB=main's library (pack_final.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" lcbar all
begin_call ${2:-590}
tstep ab 100 python3 "$here/sm90_bwd_variants.py" old=$B/old/libflashbox.so new=$B/libflashbox.so --rounds 3 \
  --shapes 64:12:1024:1,64:12:4096:1,64:12:16384:1,128:16:1024:1,128:16:4096:1,128:16:16384:1,128:16:16384:0,128:32:8192:1:8 \
  --json "$O/ab.json"
bwd_bar 60
tstep bar_full 30 python3 "$here/compare_sdpa.py" $B/libflashbox.so --backward --no-naive --non-causal --configs 128:16 \
  --seqlens 16384 --json "$O/compare_sdpa_bwd_full.json"
tstep gqa_det 100 python3 "$here/sm90_bwd_variants.py" new=$B/libflashbox.so --det new --rounds 3 \
  --shapes 128:32:8192:1:8,64:32:8192:1:8,128:16:1024:1,128:16:16384:1,128:16:16384:0,64:12:2048:1,64:12:16384:1 \
  --json "$O/gqa_det.json"
tstep racecheck_nondet 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.AtomicRepeatsMatchReference:CudaBackward.EmptyRowsGiveZeroDq'
FINAL_SUITES=test_backward,test_sm90_bwd_varlen,test_sm90_bwd_mods,test_sm90_bwd_d96,test_sm90_bwd_pad_dims,memcheck,memcheck_varlen_bwd
final_suites
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|^D(64|128) |^ *(64|128) " "$log" | tail -90
