#!/usr/bin/env bash
# The Hopper forward on head_dims served by the next instantiation up (branch sm90-head-dims: every
# multiple of 8 up to 256 on the d64 / d128 / d256 kernels, the TMA zero-filling the columns past
# head_dim), in one call on the H200. Prebuilt binaries come as a tarball (built on the CPU machine,
# `carry`ed; libflashbox.so, test_sm90, test_sm90_mods, test_sm90_varlen, test_cuda, lib/ with libgomp):
#   bench/sm90_head_dims_device_run.sh hd.tar.gz [STEP,STEP,...|core|rest]   (default: every step)
# core (one call of <= 560 s: the new head dims' tests, the existing sm90 forward suites, the timing)
# and rest (the whole test_cuda and test_backward, ExtSm80 forced to sm80, compute-sanitizer, the
# non-causal timing) split the steps for two calls. Most important first, each step under its own
# time limit, so that what ran is under $OUT if the device budget ends mid-call.
# Packing (CPU machine, build-cuda built for 90a):
#   mkdir -p /work/main/.carry/sm90-head-dims && git -C /work/wt/ring archive sm90-head-dims | tar -x -C /work/main/.carry/sm90-head-dims
#   mkdir -p /tmp/hdpack/lib && cp build-cuda/libflashbox.so build-cuda/tests/test_cuda build-cuda/tests/test_backward \
#     build-cuda/tests/sm90/test_sm90 build-cuda/tests/sm90/test_sm90_mods build-cuda/tests/sm90/test_sm90_varlen /tmp/hdpack/ \
#     && cp /usr/lib/x86_64-linux-gnu/libgomp.so.1 /tmp/hdpack/lib/ && tar -czf /work/main/.carry/sm90-head-dims/hd.tar.gz -C /tmp/hdpack .
# Device call: run(command="cd .carry/sm90-head-dims && bash bench/sm90_head_dims_device_run.sh hd.tar.gz core",
#   carry=[".carry/sm90-head-dims"], timeout_s=560)   (step limits: core 525 s, rest 540 s in all)
set -u
. "$(dirname "$0")/device_steps.sh" "$1" hd "${2:-all}"
case "${2:-all}" in
  core) ONLY=",hd_fixed,hd_mods,hd_varlen,test_sm90,test_sm90_mods,test_sm90_varlen,compare_hd," ;;
  rest) ONLY=",test_cuda,ext_sm80_forced,test_backward,memcheck_hd_varlen,memcheck_hd_fixed,compare_hd_noncausal," ;;
  *) ONLY=",${2:-all}," ;;
esac
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"

# The new head dims against the fp64 reference (guard columns, NaN in the inputs' guards, the served
# instantiation in the kernel name), then every existing sm90 forward test (d64/d128/d256 unchanged).
step hd_fixed timeout 120 $B/test_sm90 --gtest_brief=1 --gtest_filter='Sm90.HeadDims*'
step hd_mods timeout 90 $B/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.HeadDimsOnTheNextInstantiation'
step hd_varlen timeout 60 $B/test_sm90_varlen --gtest_brief=1 --gtest_filter='Sm90Varlen.HeadDimsOnTheNextInstantiation'
step test_sm90 timeout 60 $B/test_sm90 --gtest_brief=1 --gtest_filter='-Sm90.HeadDims*'
step test_sm90_mods timeout 60 $B/test_sm90_mods --gtest_brief=1 --gtest_filter='-Sm90Mods.HeadDimsOnTheNextInstantiation'
step test_sm90_varlen timeout 45 $B/test_sm90_varlen --gtest_brief=1 --gtest_filter='-Sm90Varlen.HeadDimsOnTheNextInstantiation'
# test_cuda whole (HeadDimPlan, ExtSm80: its plain/windowed d136-d224 forwards now run on sm90's d256
# kernel under auto), then ExtSm80 with the family forced to sm80, so the sm80 kernels keep their
# coverage at the head dims sm90 now takes.
step test_cuda timeout 120 $B/test_cuda --gtest_brief=1
step ext_sm80_forced timeout 90 env FLASHBOX_FLASH_ARCH=sm80 $B/test_cuda --gtest_brief=1 --gtest_filter='ExtSm80.*'
[ -x $B/test_backward ] && step test_backward timeout 120 $B/test_backward --gtest_brief=1
# compute-sanitizer on small cases: the partial-slice varlen store at d 8..120, fixed length at 8..224.
step memcheck_hd_varlen timeout 60 env FLASHBOX_SM90_VARLEN_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_varlen --gtest_brief=1 --gtest_filter='Sm90Varlen.HeadDimsOnTheNextInstantiation'
step memcheck_hd_fixed timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_sm90 --gtest_brief=1 \
  --gtest_filter='Sm90.HeadDimsDifferentLengthsAndMultiQuery'
# Speed: d96 and d192 (and the d128 / d256 kernels at their own head_dim for the ideal) on the sm90
# kernels (auto) against the sm80 ones and cuDNN in one process; TFLOP/s count the call's head_dim.
step compare_hd timeout 90 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --configs 96:16,128:16,192:8,256:8 \
  --seqlens 2048,8192 --also-families sm80 --json "$O/compare_hd_causal.json"
step compare_hd_noncausal timeout 60 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --non-causal \
  --configs 96:16,192:8 --seqlens 8192 --also-families sm80 --json "$O/compare_hd_noncausal.json"
grep -E "^(==|rc=)" "$log" | tail -30
