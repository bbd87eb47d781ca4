#!/usr/bin/env bash
# The DQPAIR kernel (bf16 d64 deterministic calls on v9's order with two dQ writers, det_walk.hpp) on
# the H200: the backward tests (Deterministic*: 50-run bitwise repeats and the kernel each call
# picked), the Hopper varlen and mods backward suites, memcheck and racecheck on small shapes, and
# main (old/) against this build, deterministic and not, in one process (sm90_bwd_variants.py).
#   bench/dqpair_device_run.sh TARBALL [STEP,STEP,...]   (default: every step; racecheck is slow)
set -u
. "$(dirname "$0")/device_steps.sh" "$1" dqpair "${2:-all}"
begin_call 590
tstep test_backward 150 $B/test_backward --gtest_brief=1
tstep test_sm90_bwd_varlen 60 $B/test_sm90_bwd_varlen --gtest_brief=1
tstep test_sm90_bwd_mods 90 $B/test_sm90_bwd_mods --gtest_brief=1
tstep det_ab 240 python3 bench/sm90_bwd_variants.py old=$B/old/libflashbox.so new=$B/libflashbox.so --det old,new \
  --rounds 3 --shapes 64:12:1024:1,64:12:2048:1,64:12:4096:1,64:12:8192:1,64:12:16384:1,64:16:8192:0,32:16:2048:1 \
  --json "$O/det_ab.json"
tstep memcheck_det 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.Deterministic*'
tstep racecheck_det 300 env FLASHBOX_TEST_DET_RUNS=2 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.DeterministicOrdersAreBitwiseRepeatable:CudaBackward.DeterministicModeIsBitwiseRepeatable'
tstep racecheck_varlen 120 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_sm90_bwd_varlen --gtest_brief=1 \
  --gtest_filter='Sm90BwdVarlen.SmallTileEdges'
