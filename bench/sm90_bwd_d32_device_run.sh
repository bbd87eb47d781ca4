#!/usr/bin/env bash
# One device call for branch d32bwd (bench/NOTES.md, sm90 backward "a head_dim 32 backward"), most
# important first:
#   pad_dims     tests/sm90/test_sm90_bwd_pad_dims: head dims 8..32 on the new d32 kernel (and 40..56,
#                104..120 on d64 / d128) against the fp64 reference, both dQ modes, deterministic bitwise
#   varlen       tests/sm90/test_sm90_bwd_varlen whole (PaddedHeadDims: d8, d16, d24, d32 on d32 with
#                lengths 0 and 1; PaddedHeadDimsLong: d32 at 1000)
#   plan         test_cuda's HeadDimPlan.* and test_backward's CudaBackward.HopperRouteChoice
#   memcheck     compute-sanitizer memcheck of the pad-dims small cases and varlen's PaddedHeadDims
#   compare      bench/compare_sdpa.py --backward at head_dim 32 (H16, B4, causal, T 1024..16384) beside cuDNN
#   ab           bench/compare_builds.py new=this build old=main 4bc5f77's (the padded d64 route), cuDNN
#                in the same process, interleaved, 3 rounds: d32 T 1024..16384 causal, d32 16384 full,
#                d40 4096 causal (unchanged route: a control)
#   compare_fp16 compare_sdpa.py --backward --dtype fp16 at d32 (the time left)
# Every step has its own limit, cut to what is left of SECONDS (default 140) in all.
#
# Packing, on the CPU machine (bench/pack_final.sh: builds BUILD, default build-cuda; OLD_LIB: the A/B
# baseline, main's libflashbox.so):
#   cd /work/wt/d32bwd && rm -rf /work/main/.carry/d32bwd && mkdir -p /work/main/.carry/d32bwd/src && \
#     git archive HEAD | tar -x -C /work/main/.carry/d32bwd/src && \
#     OLD_LIB=/work/main/build/libflashbox.so bash bench/sm90_bwd_d32_device_run.sh --pack \
#       /work/main/.carry/d32bwd/d32bwd.tar.gz build-cuda
# Device call:
#   run(command="cd .carry/d32bwd/src && bash bench/sm90_bwd_d32_device_run.sh ../d32bwd.tar.gz 140",
#       carry=[".carry/d32bwd"], timeout_s=150)
#   bash bench/sm90_bwd_d32_device_run.sh TARBALL [SECONDS] [STEP,STEP,...]
# (The measured run, bench/results/2026-12-01_sm90_bwd_d32/run.log, used this script as of 4f6b6cd,
# before main's device scripts moved to pack_final.sh and device_steps.sh's tstep: the same steps.)
set -u
tests="test_backward test_cuda test_sm90_bwd_pad_dims test_sm90_bwd_varlen"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $tests
. "$(dirname "$0")/device_steps.sh" "$1" d32bwd "${3:-all}"
begin_call ${2:-140}
tstep pad_dims 25 $B/test_sm90_bwd_pad_dims
tstep varlen 20 $B/test_sm90_bwd_varlen --gtest_brief=1
tstep plan 8 $B/test_cuda --gtest_brief=1 --gtest_filter='HeadDimPlan.*'
tstep route 5 $B/test_backward --gtest_brief=1 --gtest_filter='CudaBackward.HopperRouteChoice'
tstep memcheck 20 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_pad_dims --gtest_brief=1 --gtest_filter='Sm90BwdPadDims.SmallCases'
tstep memcheck_varlen 15 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_varlen --gtest_brief=1 --gtest_filter='Sm90BwdVarlen.PaddedHeadDims'
tstep compare 30 python3 bench/compare_sdpa.py $B/libflashbox.so --backward --no-naive --configs 32:16 \
  --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_bwd_d32.json"
if [ -f $B/old/libflashbox.so ]; then
  tstep ab 45 python3 bench/compare_builds.py new=$B/libflashbox.so old=$B/old/libflashbox.so --rounds 3 \
    --shapes 32:16:1024:1,32:16:2048:1,32:16:4096:1,32:16:8192:1,32:16:16384:1,32:16:16384:0,40:16:4096:1 \
    --json "$O/ab_d32.json"
fi
tstep compare_fp16 25 python3 bench/compare_sdpa.py $B/libflashbox.so --backward --no-naive --dtype fp16 \
  --configs 32:16 --seqlens 1024,4096,16384 --json "$O/compare_bwd_d32_fp16.json"
grep -E "^(==|rc=)|worst|ERROR|FAILED|PASSED|ERROR SUMMARY|passed|failed" "$log" | tail -60
