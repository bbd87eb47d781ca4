#!/usr/bin/env bash
# The Hopper head_dim 96 kernels (branch sm90-d96: the forward's 128 x 128 and the backward's d96
# configuration, for head dims 72..96; the backward replaces sm80 there) in one call on the H200: the
# tests against the fp64 reference, compute-sanitizer on small cases, and compare_builds.py at d96
# (B4 H16, T 1024..16384, causal and not, forward and backward) against cuDNN and main's library
# (14b8798: d96 on the d128 forward and the sm80 backward) in the same process; d32 and d64 rows for
# the count's claim that d32 needs no kernel. Prebuilt binaries come as a tarball (built on the CPU
# machine, `carry`ed): libflashbox.so, old/libflashbox.so, test_sm90, test_sm90_mods, test_sm90_varlen,
# test_sm90_bwd_d96, test_cuda, lib/ with libgomp, libopenblas, libgfortran, libquadmath.
#   bench/sm90_d96_device_run.sh d96.tar.gz [STEP,STEP,...]   (default: every step)
# Most important first, each step under its own time limit (about 200 s in all), logs under $OUT.
# Packing (CPU machine, build-cuda built for 90a):
#   rm -rf /work/main/.carry/d96 && mkdir -p /work/main/.carry/d96/src && git -C /work/wt/decode archive sm90-d96 | tar -x -C /work/main/.carry/d96/src
#   P=/tmp/d96pack; rm -rf $P; mkdir -p $P/lib $P/old && cp build-cuda/libflashbox.so build-cuda/tests/test_cuda \
#     build-cuda/tests/sm90/test_sm90 build-cuda/tests/sm90/test_sm90_mods build-cuda/tests/sm90/test_sm90_varlen \
#     build-cuda/tests/sm90/test_sm90_bwd_d96 $P/ && cp /work/main/build/libflashbox.so $P/old/ && for l in libgomp.so.1 \
#     libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do cp -L /lib/x86_64-linux-gnu/$l $P/lib/; done && \
#     tar -czf /work/main/.carry/d96/d96.tar.gz -C $P .
# Device call: run(command="cd .carry/d96/src && bash bench/sm90_d96_device_run.sh ../d96.tar.gz",
#   carry=[".carry/d96"], timeout_s=240)
set -u
. "$(dirname "$0")/device_steps.sh" "$1" d96 "${2:-all}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"

# The d96 kernel's tests (d72/80/96, T 1..4097) and the other head dims' (d8..d224 on their kernels).
step hd_fixed timeout 50 $B/test_sm90 --gtest_brief=1 --gtest_filter='Sm90.HeadDim*'
# A training step at d72/80/96: the d96 forward's O and LSE into the d96 backward, both dQ modes.
step bwd_d96 timeout 40 $B/test_sm90_bwd_d96 --gtest_brief=1
# The speed: this build (new), main's (old) and cuDNN on the same tensors, forward and backward.
step compare_d96 timeout 110 python3 bench/compare_builds.py new=$B/libflashbox.so old=$B/old/libflashbox.so --rounds 2 \
  --shapes 96:16:1024:1,96:16:2048:1,96:16:4096:1,96:16:8192:1,96:16:16384:1,96:16:1024:0,96:16:2048:0,96:16:4096:0,96:16:8192:0,96:16:16384:0 \
  --json "$O/compare_d96.json"
step memcheck_fwd timeout 25 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_sm90 --gtest_brief=1 \
  --gtest_filter='Sm90.HeadDimsDifferentLengthsAndMultiQuery'
step memcheck_bwd timeout 30 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_d96 --gtest_brief=1 --gtest_filter='Sm90BwdD96.SmallCases'
step hd_mods timeout 20 $B/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.HeadDimsOnTheNextInstantiation'
step hd_varlen timeout 20 $B/test_sm90_varlen --gtest_brief=1 --gtest_filter='Sm90Varlen.HeadDimsOnTheNextInstantiation'
step test_cuda_hd timeout 30 $B/test_cuda --gtest_brief=1 --gtest_filter='HeadDimPlan.*:ExtSm80.HeadDimsAbove128:ExtSm80.SmallCases'
step test_sm90 timeout 30 $B/test_sm90 --gtest_brief=1 --gtest_filter='-Sm90.HeadDim*'
step compare_d32 timeout 30 python3 bench/compare_builds.py new=$B/libflashbox.so --rounds 2 \
  --shapes 32:16:8192:1,64:16:8192:1,32:16:8192:0,64:16:8192:0 --json "$O/compare_d32_d64.json"
grep -E "^(==|rc=)" "$log" | tail -30
