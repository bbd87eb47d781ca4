#!/usr/bin/env bash
# One device call for branch paddims (bench/NOTES.md, sm90 backward "head dims 8..56 and 104..120 on
# the Hopper backward"), most important first:
#   pad_dims     tests/sm90/test_sm90_bwd_pad_dims: head dims 8, 32, 40, 56, 104, 112, 120 on the d64
#                / d128 kernels against the fp64 reference, both dQ modes, deterministic bitwise
#   varlen       tests/sm90/test_sm90_bwd_varlen whole (its dQ convert changed: rows of the
#                instantiation's width), PaddedHeadDims included (lengths with 0 and 1; d72..96 on d96)
#   plan         test_cuda's HeadDimPlan.* (the plans' names and scratch on a Hopper device)
#   memcheck     compute-sanitizer memcheck of the new test's small cases, varlen's SmallTileEdges and
#                PaddedHeadDims
#   test_gpu     test_backward's GPU tests (*Cuda*:BackwardApi.*; two padded shapes, 40 and 112, added)
#   compare      bench/compare_sdpa.py --backward at head dims 32, 40, 112 (H16, B4, causal, T 1024..16384)
#                with --also-families sm80 (the route these head dims took before) beside cuDNN
#   ext          test_cuda's ExtSm80 small cases (d32, d40, d80, d96 with masks and varlen: the sm90
#                backward now) and malformed cu_seqlens (the varlen convert changed)
#   fa2_dims     FlashAttention-2's tests/test_flash_attn.py (in the tarball as fa2/test_flash_attn.py,
#                never committed), its ten functions sampled at head dims 32, 40, 59, 111 (59 and 111 are
#                padded to 64 and 112 by python/flashbox), 14 shards side by side, the time left
# Every step has its own limit, cut to what is left of SECONDS (default 212) in all.
#
# Packing, on the CPU machine (builds BUILD, default build-cuda; FA2_TEST: FA2's tests/test_flash_attn.py):
#   cd /work/wt/paddims && rm -rf /work/main/.carry/paddims && mkdir -p /work/main/.carry/paddims/src && \
#     git archive HEAD | tar -x -C /work/main/.carry/paddims/src && \
#     FA2_TEST=/tmp/fa2_test_flash_attn.py bash bench/sm90_bwd_pad_dims_device_run.sh --pack \
#       /work/main/.carry/paddims/paddims.tar.gz build-cuda
# Device call:
#   run(command="cd .carry/paddims/src && bash bench/sm90_bwd_pad_dims_device_run.sh ../paddims.tar.gz 212",
#       carry=[".carry/paddims"], timeout_s=220)
#   bash bench/sm90_bwd_pad_dims_device_run.sh TARBALL [SECONDS] [STEP,STEP,...]
set -u
tests="tests/test_backward tests/test_cuda tests/sm90/test_sm90_bwd_pad_dims tests/sm90/test_sm90_bwd_varlen"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $(for t in $tests; do basename $t; done)
. "$(dirname "$0")/device_steps.sh" "$1" paddims "${3:-all}"
begin_call ${2:-212}
tstep pad_dims 30 $B/test_sm90_bwd_pad_dims
tstep varlen 25 $B/test_sm90_bwd_varlen --gtest_brief=1
tstep plan 8 $B/test_cuda --gtest_brief=1 --gtest_filter='HeadDimPlan.*'
tstep memcheck 30 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_pad_dims --gtest_brief=1 --gtest_filter='Sm90BwdPadDims.SmallCases'
tstep memcheck_varlen 20 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_varlen --gtest_brief=1 --gtest_filter='Sm90BwdVarlen.SmallTileEdges:Sm90BwdVarlen.PaddedHeadDims'
# Not brief: gtest flushes each test's line, so a step cut by its limit shows how far it got.
tstep test_gpu 80 $B/test_backward --gtest_filter='*Cuda*:BackwardApi.*'
tstep compare 50 python3 bench/compare_sdpa.py $B/libflashbox.so --backward --no-naive --configs 32:16,40:16,112:16 \
  --seqlens 1024,2048,4096,8192,16384 --also-families sm80 --json "$O/compare_bwd_pad_dims.json"
tstep ext 15 $B/test_cuda --gtest_brief=1 --gtest_filter='ExtSm80.SmallCases:ExtSm80.MalformedCuSeqlensStayInBounds'
# FA2's ten functions of issue 14's bar, sampled: 14 shards side by side (as bench/fa2_matrix.sh), each
# running every function on its slice of the shuffled matrix at these head dims for an equal share of
# the time left (the whole slice is more than such a call holds); the merge adds them up.
fa2_dims() {
  local left=$1 n=14 dir="$O/fa2_dims"; mkdir -p "$dir"
  export PYTHONPATH=bench/fa2_compat:python:tests/python
  local per=$(( (left - 12) / 10 )); (( per < 1 )) && per=1
  for i in $(seq 0 $((n - 1))); do
    OMP_NUM_THREADS=1 timeout $left python3 bench/fa2_direct.py $B/fa2/test_flash_attn.py --seconds $per \
      --shard $i/$n --head-dims 32,40,59,111 --json "$dir/shard_$i.json" > "$dir/shard_$i.log" 2>&1 &
  done
  wait
  python3 bench/fa2_matrix_merge.py "$dir"/shard_*.json --shards $n --json "$dir/merged.json"
  tar -czf "$dir/shards.tar.gz" -C "$dir" $(cd "$dir" && ls shard_*) && rm -f "$dir"/shard_*
}
if [ -f $B/fa2/test_flash_attn.py ]; then
  left=$(( DEADLINE - $(date +%s) - 6 ))
  if (( left >= 20 )); then
    step fa2_dims fa2_dims $left
  else
    echo "== fa2_dims skipped (no time left)" | tee -a "$log"
  fi
fi
grep -E "^(==|rc=)|worst|ERROR|FAILED|PASSED|ERROR SUMMARY|passed|failed" "$log" | tail -60
