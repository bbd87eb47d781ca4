#!/usr/bin/env bash
# One device call for branch pdl (bench/NOTES.md, sm90 backward "programmatic dependent launch"),
# most important first, every step under its own limit (cut to what is left of SECONDS, default 195):
#   test_gpu     every GPU test of test_backward, PDL on (the default)
#   variants     new (PDL) against main's build (old/libflashbox.so) and cuDNN, non-deterministic and
#                deterministic, one process (bench/sm90_bwd_variants.py: D64 H12 and D128 H16 causal
#                T = 1024 .. 16384), a per-kernel profile at T = 1024
#   test_sm90_bwd_varlen, test_sm90_bwd_mods   the varlen chain (list, prepare, main, convert_varlen)
#                and the masked / deterministic backward, PDL on
#   pytest       the Python package's CUDA graph capture and torch.compile tests, and its backward's
#   memcheck_*, racecheck_*   compute-sanitizer on small shapes (plain: several key blocks, both
#                deterministic orders; varlen)
#   varlen_on, varlen_off   bench/sm90_bwd_varlen_bench with PDL on, then FLASHBOX_SM90_BWD_PDL=0
#   variants_off new with FLASHBOX_SM90_BWD_PDL=0 against old at T = 1024, 2048 (the switch)
# Packing, on the CPU machine:
#   rm -rf /work/main/.carry/pdl && mkdir -p /work/main/.carry/pdl/src && \
#     git archive HEAD | tar -x -C /work/main/.carry/pdl/src && \
#     OLD_LIB=/work/main/build/libflashbox.so bash bench/sm90_bwd_pdl_device_run.sh --pack \
#       /work/main/.carry/pdl/pdl.tar.gz build-cuda
# Device call:
#   run(command="cd .carry/pdl/src && bash bench/sm90_bwd_pdl_device_run.sh ../pdl.tar.gz 195",
#       carry=[".carry/pdl"], timeout_s=200)
#   bash bench/sm90_bwd_pdl_device_run.sh TARBALL [SECONDS] [STEP,STEP,...]
set -u
tests="tests/test_backward tests/sm90/test_sm90_bwd_mods tests/sm90/test_sm90_bwd_varlen tests/sm90/sm90_bwd_varlen_bench"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $(for t in $tests; do basename $t; done)
. "$(dirname "$0")/device_steps.sh" "$1" pdl "${3:-all}"
begin_call ${2:-195}
tstep test_gpu 70 $B/test_backward --gtest_filter='*Cuda*:BackwardApi.*'
builds="new=$B/libflashbox.so" det=new
[ -f $B/old/libflashbox.so ] && builds="$builds old=$B/old/libflashbox.so" det=new,old
shapes_v=$(for d in 64:12 128:16; do for t in 1024 2048 4096 8192 16384; do printf '%s:%s:1,' $d $t; done; done)
tstep variants 50 python3 bench/sm90_bwd_variants.py $builds --det $det --rounds 3 --shapes "${shapes_v%,}" \
  --repeat-check 128:16:2048:1 --profile 1024 --json "$O/variants.json"
tstep test_sm90_bwd_varlen 12 $B/test_sm90_bwd_varlen --gtest_brief=1
tstep test_sm90_bwd_mods 10 $B/test_sm90_bwd_mods --gtest_brief=1
tstep pytest 30 python3 -m pytest -q -rs tests/python/test_torch_ops.py -k "graph or compile or backward or gradients"
shapes='Shapes/CudaBackwardShapes.BothModesMatchReference'
plain="$shapes/22:$shapes/23:$shapes/42:$shapes/43:CudaBackward.EmptyRowsGiveZeroDq"
for tool in memcheck racecheck; do
  tstep ${tool}_plain 12 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_backward --gtest_brief=1 \
    --gtest_filter="$plain"
done
tstep memcheck_varlen 8 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_sm90_bwd_varlen --gtest_brief=1 \
  --gtest_filter='Sm90BwdVarlen.SmallDifferentLengths:Sm90BwdVarlen.SmallWindowsSoftcapAlibi'
tstep varlen_on 10 $B/sm90_bwd_varlen_bench --json "$O/varlen_on.json"
tstep varlen_off 10 env FLASHBOX_SM90_BWD_PDL=0 $B/sm90_bwd_varlen_bench --json "$O/varlen_off.json"
tstep variants_off 15 env FLASHBOX_SM90_BWD_PDL=0 python3 bench/sm90_bwd_variants.py $builds --rounds 3 --no-cudnn \
  --shapes 64:12:1024:1,128:16:1024:1,128:16:2048:1 --repeat-check 128:16:1024:1 --json "$O/variants_off.json"
grep -E "^(==|rc=)|bitwise|^D(64|128) |ERROR|FAILED|PASSED|passed|failed|RACECHECK SUMMARY|ERROR SUMMARY|profile" "$log" | tail -80
