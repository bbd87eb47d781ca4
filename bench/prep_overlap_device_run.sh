#!/usr/bin/env bash
# prepare beside the main kernel (prepare_overlap_kernel, 2026-12-03) on the H200 in one call: its
# A/B in one process against the same library with the switch off (FLASHBOX_SM90_BWD_PREP_OVERLAP=0:
# the old prepare, same main kernel) and against main's library (old/), at three prepare grid sizes;
# the window rows kernel by kernel; issue 15's bar; the gradient tests with prepare squeezed onto one
# CTA (every main CTA waits on its heads' counters) and spread over every SM; the backward suites and
# compute-sanitizer on small shapes.
#   bench/prep_overlap_device_run.sh TARBALL [SECONDS (590)] [STEPS (all; comma-separated)]
# TARBALL: pack_final.sh's binaries of branch prepovl (main has no overlapped prepare: bench/NOTES.md,
# "prepare beside the main kernel", falsified) with OLD_LIB=main's library.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" prepovl ${3:-all}
begin_call ${2:-590}
tstep ab 150 python3 "$here/sm90_bwd_variants.py" old=$B/old/libflashbox.so off=$B/libflashbox.so new=$B/libflashbox.so \
  c16=$B/libflashbox.so c66=$B/libflashbox.so --env off:FLASHBOX_SM90_BWD_PREP_OVERLAP=0 \
  --env c16:FLASHBOX_SM90_BWD_PREP_CTAS=16 --env c66:FLASHBOX_SM90_BWD_PREP_CTAS=66 --rounds 3 \
  --shapes 64:12:1024:1,64:12:4096:1,64:12:16384:1,128:16:1024:1,128:16:4096:1,128:16:16384:1,128:16:16384:0,128:32:8192:1:8 \
  --json "$O/ab.json"
bwd_phases_on_off FLASHBOX_SM90_BWD_PREP_OVERLAP
bwd_bar 60
tstep bar_full 30 python3 "$here/compare_sdpa.py" $B/libflashbox.so --backward --no-naive --non-causal --configs 128:16 \
  --seqlens 16384 --json "$O/compare_sdpa_bwd_full.json"
tstep tests_ctas1 60 env FLASHBOX_SM90_BWD_PREP_CTAS=1 $B/test_backward --gtest_brief=1
tstep tests_ctas132 60 env FLASHBOX_SM90_BWD_PREP_CTAS=132 $B/test_backward --gtest_brief=1
tstep racecheck_nondet 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.AtomicRepeatsMatchReference:CudaBackward.EmptyRowsGiveZeroDq'
FINAL_SUITES=test_backward,test_sm90_bwd_varlen,test_sm90_bwd_mods,test_sm90_bwd_d96,test_sm90_bwd_pad_dims,memcheck,memcheck_varlen_bwd
final_suites
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|^D(64|128) |^ *(64|128) " "$log" | tail -90
