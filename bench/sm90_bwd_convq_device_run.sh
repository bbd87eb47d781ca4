#!/usr/bin/env bash
# One device call for branch convq (bench/NOTES.md, sm90 backward "dQ converted as its blocks
# complete"), most important first, every step under its own limit (cut to what is left of SECONDS,
# default 150):
#   test_gpu     every GPU test of test_backward, early convert on (the default); among them
#                CudaBackward.AtomicRepeatsMatchReference (the scratch back from the pool with the
#                last call's counters) and the deterministic 50-run bitwise checks
#   variants     new (early convert) against main 8f8c8c9's build (old/libflashbox.so), the same new
#                library with FLASHBOX_SM90_BWD_EARLY_CONVERT=0 (off, same process: the switch is read
#                at every call) and cuDNN; deterministic new and old (the deterministic path converts
#                early too, polling its semaphores); bench/sm90_bwd_variants.py, D64 H12 and D128 H16
#                causal T = 1024 .. 16384, a per-kernel profile at T = 1024
#   test_sm90_bwd_varlen, test_sm90_bwd_mods   varlen (keeps the whole-grid wait, but the main
#                kernel's launch_dependents moved) and the masked / windowed / deterministic backward
#                with early convert (adders_of under windows, softcap, ALiBi)
#   pad_dims     test_sm90_bwd_pad_dims: head dims 8..56 and 104..120 on the d64/d128 kernels (the early
#                convert's columns past head_dim)
#   plan         test_cuda's HeadDimPlan.* (plan names and scratch sizes on a Hopper device: the
#                counters are in the expected workspace)
#   memcheck_*, racecheck_*   compute-sanitizer on small shapes (test_backward's 22/23/42/43: several
#                key blocks, GQA, both deterministic orders, and EmptyRowsGiveZeroDq; varlen)
#   shapes_off   with FLASHBOX_SM90_BWD_EARLY_CONVERT=0 (the old convert): test_backward's shapes
#                20-23 and 36-47 (d128 129x129, d64/d128 with seqlen_q != seqlen_k, GQA; both modes,
#                causal or not, both dtypes), EmptyRowsGiveZeroDq, AtomicRepeatsMatchReference
#   pytest       the Python package's CUDA graph capture / torch.compile / backward tests
# Packing, on the CPU machine:
#   rm -rf /work/main/.carry/convq && mkdir -p /work/main/.carry/convq/src && \
#     git archive HEAD | tar -x -C /work/main/.carry/convq/src && \
#     OLD_LIB=/work/base/libflashbox.so bash bench/sm90_bwd_convq_device_run.sh --pack \
#       /work/main/.carry/convq/convq.tar.gz build-cuda
# Device call:
#   run(command="cd .carry/convq/src && bash bench/sm90_bwd_convq_device_run.sh ../convq.tar.gz 150",
#       carry=[".carry/convq"], timeout_s=155)
#   bash bench/sm90_bwd_convq_device_run.sh TARBALL [SECONDS] [STEP,STEP,...]
set -u
tests="tests/test_backward tests/sm90/test_sm90_bwd_mods tests/sm90/test_sm90_bwd_varlen tests/sm90/test_sm90_bwd_pad_dims tests/test_cuda"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $(for t in $tests; do basename $t; done)
. "$(dirname "$0")/device_steps.sh" "$1" convq "${3:-all}"
begin_call ${2:-150}
tstep test_gpu 60 $B/test_backward --gtest_filter='*Cuda*:BackwardApi.*'
builds="new=$B/libflashbox.so off=$B/libflashbox.so" det=new
[ -f $B/old/libflashbox.so ] && builds="$builds old=$B/old/libflashbox.so" det=new,old
shapes_v=$(for d in 64:12 128:16; do for t in 1024 2048 4096 8192 16384; do printf '%s:%s:1,' $d $t; done; done)
tstep variants 50 python3 bench/sm90_bwd_variants.py $builds --env off:FLASHBOX_SM90_BWD_EARLY_CONVERT=0 --det $det --rounds 3 --shapes "${shapes_v%,}" \
  --repeat-check 128:16:2048:1 --profile 1024 --json "$O/variants.json"
tstep test_sm90_bwd_varlen 10 $B/test_sm90_bwd_varlen --gtest_brief=1
tstep test_sm90_bwd_mods 8 $B/test_sm90_bwd_mods --gtest_brief=1
tstep pad_dims 8 $B/test_sm90_bwd_pad_dims --gtest_brief=1
tstep plan 5 $B/test_cuda --gtest_brief=1 --gtest_filter='HeadDimPlan.*'
shapes='Shapes/CudaBackwardShapes.BothModesMatchReference'
plain="$shapes/22:$shapes/23:$shapes/42:$shapes/43:CudaBackward.EmptyRowsGiveZeroDq"
for tool in memcheck racecheck; do
  tstep ${tool}_plain 8 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_backward --gtest_brief=1 \
    --gtest_filter="$plain"
done
tstep memcheck_varlen 5 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_sm90_bwd_varlen --gtest_brief=1 \
  --gtest_filter='Sm90BwdVarlen.SmallDifferentLengths:Sm90BwdVarlen.SmallWindowsSoftcapAlibi'
off_filter=$(for i in 20 21 22 23 36 37 38 39 40 41 42 43 44 45 46 47; do printf '%s/%s:' "$shapes" $i; done)
tstep shapes_off 12 env FLASHBOX_SM90_BWD_EARLY_CONVERT=0 $B/test_backward --gtest_brief=1 \
  --gtest_filter="${off_filter}CudaBackward.EmptyRowsGiveZeroDq:CudaBackward.AtomicRepeatsMatchReference"
tstep pytest 25 python3 -m pytest -q -rs tests/python/test_torch_ops.py -k "graph or compile or backward or gradients"
grep -E "^(==|rc=)|bitwise|^D(64|128) |ERROR|FAILED|PASSED|passed|failed|RACECHECK SUMMARY|ERROR SUMMARY|profile" "$log" | tail -80
