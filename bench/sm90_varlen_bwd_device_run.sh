#!/usr/bin/env bash
# The sm90 varlen backward's checks in one call on the H200 (2026-12-01): its GPU test, the varlen
# backward benchmark (bench/sm90_bwd_varlen_bench.cpp: sm90 varlen against the sum of fixed-length
# sm90 calls and against the sm80 varlen backward, one process; the B = 8 pack of 512..8192 and a
# GPT-style pack of 16 ~1000-token documents, and the deterministic mode on the B = 8 pack),
# compute-sanitizer memcheck on the small varlen cases, the masked backward's test, every backward
# (test_backward), test_cuda's extension cases (ExtSm80.*: their d64/d128 varlen backward now runs on
# sm90), and the fixed-length backward of this build against an earlier one
# (compare_builds.py, when the tarball has old/libflashbox.so).
# Prebuilt binaries come as a tarball (built on the CPU machine, carried):
#   bench/sm90_varlen_bwd_device_run.sh .carry/varlenbwd/bin.tar.gz [STEP,STEP,...]   (default: every step)
# (libflashbox.so, test_sm90_bwd_varlen, test_sm90_bwd_mods, test_backward, test_cuda, sm90_bwd_varlen_bench, lib/,
# optional old/libflashbox.so). Every step has its own time limit, most important first; logs to $OUT.
set -u
. "$(dirname "$0")/device_steps.sh" "$1" varlenbwd "${2:-all}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"
step test_sm90_bwd_varlen timeout 50 $B/test_sm90_bwd_varlen --gtest_brief=1
step bench_b8 timeout 25 $B/sm90_bwd_varlen_bench --json "$O/bench_b8.json"
step bench_gpt timeout 20 $B/sm90_bwd_varlen_bench --lens 1024,812,1300,977,700,1150,1024,890,1210,760,1024,1099,930,1280,705,1019 \
  --json "$O/bench_gpt.json"
step memcheck_varlen timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_sm90_bwd_varlen --gtest_brief=1 \
  --gtest_filter='Sm90BwdVarlen.SmallDifferentLengths:Sm90BwdVarlen.SmallWindowsSoftcapAlibi'
step test_sm90_bwd_mods timeout 20 $B/test_sm90_bwd_mods --gtest_brief=1
step test_backward timeout 70 $B/test_backward --gtest_brief=1
step ext_sm80 timeout 30 $B/test_cuda --gtest_brief=1 --gtest_filter='ExtSm80.*'
step bench_b8_det timeout 15 $B/sm90_bwd_varlen_bench --deterministic --json "$O/bench_b8_det.json"
[ -f $B/old/libflashbox.so ] && step compare_builds_bwd timeout 40 python3 bench/compare_builds.py new=$B/libflashbox.so \
  old=$B/old/libflashbox.so --rounds 2 --shapes 64:12:4096:1,128:16:4096:1,128:16:16384:1 --json "$O/compare_builds.json"
grep -E "^(==|rc=)" "$log"
