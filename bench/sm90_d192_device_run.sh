#!/usr/bin/env bash
# The Hopper forward's head_dim 192 kernel (branch sm90-d192: 128 x 112 for head dims 136..192) in one
# call on the H200: its tests against the fp64 reference, compute-sanitizer on one small case, and
# compare_sdpa.py at d192 (B4 H8, T 1024..16384, causal and not) against cuDNN / FA2 / efficient, with
# the old path (the same calls on the 256 kernel: tile 128x64) in the same process. Prebuilt binaries
# come as a tarball (built on the CPU machine, `carry`ed): libflashbox.so, test_sm90, test_sm90_mods,
# test_cuda, lib/ with libgomp, libopenblas, libgfortran, libquadmath.
#   bench/sm90_d192_device_run.sh d192.tar.gz [STEP,STEP,...]   (default: every step)
# Most important first, each step under its own time limit (about 150 s in all), logs under $OUT.
# Packing (CPU machine, build-cuda built for 90a):
#   rm -rf /work/main/.carry/d192 && mkdir -p /work/main/.carry/d192/src && git -C /work/wt/ring archive sm90-d192 | tar -x -C /work/main/.carry/d192/src
#   P=/tmp/d192pack; rm -rf $P; mkdir -p $P/lib && cp build-cuda/libflashbox.so build-cuda/tests/test_cuda \
#     build-cuda/tests/sm90/test_sm90 build-cuda/tests/sm90/test_sm90_mods $P/ && for l in libgomp.so.1 libopenblas.so.0 \
#     libgfortran.so.5 libquadmath.so.0; do cp -L /lib/x86_64-linux-gnu/$l $P/lib/; done && tar -czf /work/main/.carry/d192/d192.tar.gz -C $P .
# Device call: run(command="cd .carry/d192/src && bash bench/sm90_d192_device_run.sh ../d192.tar.gz",
#   carry=[".carry/d192"], timeout_s=165)
set -u
. "$(dirname "$0")/device_steps.sh" "$1" d192 "${2:-all}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"

# The head-dim tests (d136/160/176/192 on the 192 kernel, 200/224 on 256, T 1..4097, the old path).
step hd_fixed timeout 60 $B/test_sm90 --gtest_brief=1 --gtest_filter='Sm90.HeadDim*'
# The speed, causal: d192 auto (the 192 kernel) and tile 128x64 (the 256 kernel) against SDPA.
step compare_d192 timeout 45 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --configs 192:8 \
  --seqlens 1024,2048,4096,8192,16384 --also-families tile128x64 --json "$O/compare_d192_causal.json"
step hd_mods timeout 25 $B/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.HeadDimsOnTheNextInstantiation'
step memcheck_d192 timeout 25 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_sm90 --gtest_brief=1 \
  --gtest_filter='Sm90.HeadDimsDifferentLengthsAndMultiQuery'
step compare_d192_noncausal timeout 40 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --non-causal \
  --configs 192:8 --seqlens 1024,2048,4096,8192,16384 --also-families tile128x64 --json "$O/compare_d192_noncausal.json"
step test_sm90 timeout 40 $B/test_sm90 --gtest_brief=1 --gtest_filter='-Sm90.HeadDim*'
step test_cuda_hd timeout 40 $B/test_cuda --gtest_brief=1 --gtest_filter='HeadDimPlan.*:ExtSm80.HeadDimsAbove128*'
grep -E "^(==|rc=)" "$log" | tail -30
