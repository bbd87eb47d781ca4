#!/usr/bin/env bash
# (Measures branch inconv's library: its kernel change is kept as bench/results/2026-12-04_sm90_bwd_inkernel_convert/inconv_e148d44.patch, not on main.)
# The in-kernel dQ convert (bwd_dq_convert, the d128 DQLAG kernels; 2026-12-03) on the H200 in one
# call: correctness first (test_backward with its InKernelConvertBothWays and EmptyRowsGiveZeroDq,
# racecheck and memcheck on small shapes), then the A/B in one process against the same library with
# the switch off (FLASHBOX_SM90_BWD_IN_KERNEL_CONVERT=0: the early convert kernel, as main; the same
# code as main otherwise), the backward's phases kernel by kernel (window rows and their peers), issue 15's bar.
#   bench/inkernel_convert_device_run.sh TARBALL [SECONDS (590)] [STEPS (all; comma-separated)]
# TARBALL: PACK_NO_BUILD=1 bash bench/pack_final.sh ... test_backward
#   test_sm90_bwd_mods test_sm90_bwd_pad_dims test_sm90_bwd_varlen test_sm90_bwd_d96 test_cuda
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" inconv ${3:-all}
begin_call ${2:-590}
tstep tests 90 $B/test_backward --gtest_brief=1
tstep mods 60 $B/test_sm90_bwd_mods --gtest_brief=1
tstep pad_dims 40 $B/test_sm90_bwd_pad_dims --gtest_brief=1
tstep racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.AtomicRepeatsMatchReference:CudaBackward.EmptyRowsGiveZeroDq'
tstep memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.EmptyRowsGiveZeroDq:CudaBackwardShapes.*:CudaBackward.StridedLayoutsAndScale'
tstep ab 150 python3 "$here/sm90_bwd_variants.py" off=$B/libflashbox.so new=$B/libflashbox.so \
  --env off:FLASHBOX_SM90_BWD_IN_KERNEL_CONVERT=0 --rounds 3 \
  --shapes 64:12:4096:1,128:16:1024:1,128:16:2048:1,128:16:4096:1,128:16:16384:1,128:16:16384:0,128:32:8192:1:8 \
  --json "$O/ab.json"
bwd_phases_on_off FLASHBOX_SM90_BWD_IN_KERNEL_CONVERT
bwd_bar 60
FINAL_SUITES=test_sm90_bwd_varlen,test_sm90_bwd_d96,test_cuda
final_suites
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|^D(64|128) |^ *(64|128) " "$log" | tail -90
