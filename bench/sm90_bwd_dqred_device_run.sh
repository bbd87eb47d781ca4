#!/usr/bin/env bash
# One device call for branch dqred (bench/NOTES.md, sm90 backward "dQ from registers"), most important
# first; RED=1 marks the steps run with FLASHBOX_SM90_BWD_DQRED=1 (bf16 non-deterministic d64/d128 on
# the DQRED kernels, "_dqred" in the kernel name), RED=3 with =3 (d128 also with three dS^T buffers,
# "_dqred_ds3"):
#   test_gpu_red   every GPU test of test_backward with =1 (its new DqRedKernelsMatchReference sets
#                  both values itself)
#   mods_red, varlen_red   the masked and the variable-length backward with DQRED=3 (d64 and d128 DQRED
#                  kernels, the d128 one with three buffers; =1's d128 kernel is covered by test_gpu_red)
#   memcheck_*, racecheck_*   compute-sanitizer on test_backward's small shapes (22/23/42/43 and
#                  EmptyRowsGiveZeroDq) with =1 and =3, memcheck on the varlen small cases with =3
#   variants       bench/sm90_bwd_variants.py in one process: red (=1), ds3 (=3), new (the default
#                  kernels: staging, dQ writer, early convert), off (new with
#                  FLASHBOX_SM90_BWD_EARLY_CONVERT=0: the staging kernels without the early convert,
#                  the fair A/B of the kernels themselves) and cuDNN; D64 H12 and D128 H16 causal
#                  T = 1024 .. 16384, non-causal D128 16384, GQA 32/8 D128 and D64 8192
#   test_gpu_ds3_and_default   test_backward's GPU tests with =3 and without the switch (the default
#                  kernels, byte-identical to main's), side by side, logs test_gpu_ds3.log, test_gpu.log
# Every step has its own limit, cut to what is left of SECONDS (default 285) in all.
# It ran once, at 8836883 (bench/results/2026-12-02_sm90_bwd_dqred/). Both variants lost and were
# deleted in the next commit (6908045): from there nothing reads the variable (red = ds3 = new), so
# the script measures something only at 8836883.
# Packing, on the CPU machine (the device runs in a copy of /work/main, so the carry goes under its
# .carry/, which git ignores there; BUILD is the worktree's build-cuda at 8836883):
#   cd /work/wt/dqred && bash bench/sm90_bwd_dqred_device_run.sh --pack .carry/dqred/dqred.tar.gz build-cuda && \
#     rm -rf /work/main/.carry/dqred && mkdir -p /work/main/.carry/dqred/src && \
#     git archive 8836883 | tar -x -C /work/main/.carry/dqred/src && cp .carry/dqred/dqred.tar.gz /work/main/.carry/dqred/
# Device call (as it ran):
#   run(command="cd .carry/dqred/src && bash bench/sm90_bwd_dqred_device_run.sh ../dqred.tar.gz 280",
#       carry=[".carry/dqred"], timeout_s=295)
#   bash bench/sm90_bwd_dqred_device_run.sh TARBALL [SECONDS] [STEP,STEP,...]
set -u
tests="test_backward test_sm90_bwd_mods test_sm90_bwd_varlen"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $tests
. "$(dirname "$0")/device_steps.sh" "$1" dqred "${3:-all}"
begin_call ${2:-285}
RED1="env FLASHBOX_SM90_BWD_DQRED=1" RED3="env FLASHBOX_SM90_BWD_DQRED=3"
gpu='*Cuda*:BackwardApi.*'
tstep test_gpu_red 75 $RED1 $B/test_backward --gtest_brief=1 --gtest_filter="$gpu"
tstep mods_red 15 $RED3 $B/test_sm90_bwd_mods --gtest_brief=1
tstep varlen_red 15 $RED3 $B/test_sm90_bwd_varlen --gtest_brief=1
shapes='Shapes/CudaBackwardShapes.BothModesMatchReference'
plain="$shapes/22:$shapes/23:$shapes/42:$shapes/43:CudaBackward.EmptyRowsGiveZeroDq"
for tool in memcheck racecheck; do
  for r in 1 3; do
    tstep ${tool}_red$r 15 env FLASHBOX_SM90_BWD_DQRED=$r compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/test_backward --gtest_brief=1 --gtest_filter="$plain"
  done
done
tstep memcheck_varlen_red 10 $RED3 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_sm90_bwd_varlen \
  --gtest_brief=1 --gtest_filter='Sm90BwdVarlen.SmallDifferentLengths:Sm90BwdVarlen.SmallWindowsSoftcapAlibi'
L=$B/libflashbox.so
shapes_v=$(for t in 1024 2048 4096 8192 16384; do printf '64:12:%s:1,' $t; done; \
  for t in 1024 2048 4096 8192 16384; do printf '128:16:%s:1,' $t; done; echo '128:16:16384:0,128:32:8192:1:8,64:32:8192:1:8')
tstep variants 80 python3 bench/sm90_bwd_variants.py red=$L ds3=$L new=$L off=$L --env red:FLASHBOX_SM90_BWD_DQRED=1 \
  --env ds3:FLASHBOX_SM90_BWD_DQRED=3 --env off:FLASHBOX_SM90_BWD_EARLY_CONVERT=0 --rounds 3 \
  --shapes "$shapes_v" --json "$O/variants.json"
# The last two side by side (each mostly its fp64 reference on the CPU, 8 threads each), each under
# its own timeout, their logs apart; the step's rc is the worse of the two.
pair() {
  local lim=$(( DEADLINE - $(date +%s) - 4 ))
  (( lim > 90 )) && lim=90
  OMP_NUM_THREADS=8 timeout $lim $RED3 $B/test_backward --gtest_brief=1 --gtest_filter="$gpu" > "$O/test_gpu_ds3.log" 2>&1 &
  local a=$!
  OMP_NUM_THREADS=8 timeout $lim $B/test_backward --gtest_brief=1 --gtest_filter="$gpu" > "$O/test_gpu.log" 2>&1 &
  local b=$!
  wait $a; local ra=$?; wait $b; local rb=$?
  echo "test_gpu_ds3 rc=$ra: $(grep -E 'PASSED|FAILED' "$O/test_gpu_ds3.log" | tr '\n' ' ')"
  echo "test_gpu rc=$rb: $(grep -E 'PASSED|FAILED' "$O/test_gpu.log" | tr '\n' ' ')"
  return $(( ra > rb ? ra : rb ))
}
step test_gpu_ds3_and_default pair
grep -E "^(==|rc=)|^D(64|128) |ERROR|FAILED|PASSED|RACECHECK SUMMARY|ERROR SUMMARY" "$log" | tail -80
