#!/usr/bin/env bash
# One device call for branch bwdmods (bench/NOTES.md, sm90 backward "v19: softcap and ALiBi with the
# plain path's overlap"), most important first:
#   mods           test_sm90_bwd_mods (the masked backward against the fp64 reference, new cases included)
#   test_gpu       every GPU test of test_backward (the plain path)
#   memcheck_mods  compute-sanitizer memcheck on the small masked cases
#   masks_new/old_1  bench/compare_masks.py --backward --only plain,softcap30,alibi for this build and
#                  main's (old/libflashbox.so): the ratio that counts is transformed / plain within a build
#   builds         bench/compare_builds.py new/old on the plain causal backward (interleaved rounds):
#                  the plain path not slower than main's
#   varlen, ext_sm80  test_sm90_bwd_varlen (mods cases included) and test_cuda's ExtSm80 (its d64/d128
#                  mask cases run the sm90 backward)
#   masks_new/old_2  the compare_masks pair again, as time allows
# Every step has its own limit, cut to what is left of SECONDS (default 225) in all.
# It ran once, at a56a529 (bench/results/2026-12-02_sm90_bwd_mods_overlap/).
# Packing, on the CPU machine (the device copies the lead's checkout, so the carry lies under
# /work/main/.carry/, ignored there, with this branch's tree beside the tarball):
#   cd /work/wt/bwdmods && OLD_LIB=/work/main/build-cuda/libflashbox.so \
#     bash bench/sm90_bwd_mods_overlap_device_run.sh --pack .carry/bwdmods/x.tar.gz build-cuda && \
#     rm -rf /work/main/.carry/bwdmods && mkdir -p /work/main/.carry/bwdmods/src && \
#     git archive HEAD | tar -x -C /work/main/.carry/bwdmods/src && cp .carry/bwdmods/x.tar.gz /work/main/.carry/bwdmods/
# Device call:
#   run(command="cd .carry/bwdmods/src && bash bench/sm90_bwd_mods_overlap_device_run.sh ../x.tar.gz 225",
#       carry=[".carry/bwdmods"], timeout_s=240)
set -u
tests="test_sm90_bwd_mods test_backward test_sm90_bwd_varlen test_cuda"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $tests
. "$(dirname "$0")/device_steps.sh" "$1" bwdmods "${3:-all}"
begin_call ${2:-225}
tstep mods 60 $B/test_sm90_bwd_mods --gtest_brief=1
tstep test_gpu 70 $B/test_backward --gtest_brief=1 --gtest_filter='*Cuda*:BackwardApi.*'
tstep memcheck_mods 40 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_mods --gtest_brief=1 --gtest_filter='Sm90BwdMods.SmallCases'
masks="--backward --seqlens 4096,16384 --configs 64:12,128:16 --only plain,softcap30,alibi"
masks_round() {
  tstep masks_new_$1 30 python3 bench/compare_masks.py $B/libflashbox.so $masks --json "$O/masks_new_$1.json"
  [ -f $B/old/libflashbox.so ] && tstep masks_old_$1 30 python3 bench/compare_masks.py $B/old/libflashbox.so $masks \
    --json "$O/masks_old_$1.json"
}
masks_round 1
[ -f $B/old/libflashbox.so ] && tstep builds 45 python3 bench/compare_builds.py new=$B/libflashbox.so \
  old=$B/old/libflashbox.so --rounds 2 --shapes 64:12:4096:1,64:12:16384:1,128:16:4096:1,128:16:16384:1 \
  --json "$O/compare_builds.json"
tstep varlen 30 $B/test_sm90_bwd_varlen --gtest_brief=1
tstep ext_sm80 30 $B/test_cuda --gtest_brief=1 --gtest_filter='ExtSm80.*'
masks_round 2
grep -E "^(==|rc=)|^D(64|128) |ERROR|FAILED|PASSED|ERROR SUMMARY|worst" "$log" | tail -90
