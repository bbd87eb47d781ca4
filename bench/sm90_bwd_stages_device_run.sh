#!/usr/bin/env bash
# Device call for branch stages (bench/NOTES.md "(branch stages, 2026-12-02)"): s3 = fp16 d128 on
# DQLAG + a Q/dO ring of 3 at d128; lag = fp16 d128 on DQLAG only (bf16: main's machine code, the
# noise control); old = main at c4ebd64. Tests of s3, then sm90_bwd_variants.py bf16 and fp16.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$here/s3.tar.gz" stages all
begin_call ${1:-200}
gpu='*Cuda*:BackwardApi.*'
shapes='Shapes/CudaBackwardShapes.BothModesMatchReference'
small="$shapes/22:$shapes/23:$shapes/42:$shapes/43:CudaBackward.EmptyRowsGiveZeroDq"
tests() {
  local worst=0 r
  OMP_NUM_THREADS=10 timeout 90 $B/test_backward --gtest_brief=1 --gtest_filter="$gpu" > "$O/test_backward.log" 2>&1 &
  local a=$!
  for t in test_sm90_bwd_mods test_sm90_bwd_varlen test_sm90_bwd_pad_dims; do
    OMP_NUM_THREADS=6 timeout 50 $B/$t --gtest_brief=1 > "$O/$t.log" 2>&1; r=$?
    echo "$t rc=$r: $(grep -E 'PASSED|FAILED' "$O/$t.log" | tr '\n' ' ')"; (( r > worst )) && worst=$r
  done
  for tool in memcheck racecheck; do
    OMP_NUM_THREADS=6 timeout 25 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_backward --gtest_brief=1 \
      --gtest_filter="$small" > "$O/$tool.log" 2>&1; r=$?
    echo "$tool rc=$r: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$O/$tool.log" | tr '\n' ' ')"
    (( r > worst )) && worst=$r
  done
  wait $a; r=$?
  echo "test_backward rc=$r: $(grep -E 'PASSED|FAILED' "$O/test_backward.log" | tr '\n' ' ')"
  (( r > worst )) && worst=$r
  return $worst
}
step tests tests
libs="old=$B/old/libflashbox.so lag=$B/lag/libflashbox.so s3=$B/libflashbox.so"
tstep bf16 70 python3 "$here/sm90_bwd_variants.py" $libs --rounds 5 \
  --shapes 128:16:2048:1,128:16:8192:1,128:16:16384:1,128:16:16384:0,128:32:8192:1:8 --json "$O/variants_bf16.json"
tstep fp16 45 python3 "$here/sm90_bwd_variants.py" $libs --rounds 3 --dtype fp16 \
  --shapes 128:16:2048:1,128:16:16384:1,128:16:16384:0 --json "$O/variants_fp16.json"
cd "$O" && tar -czf logs.tar.gz *.log && rm -f test_*.log memcheck.log racecheck.log
grep -E "^(==|rc=)|rc=|^  *D?[0-9]|TFLOP|ratio" "$log" | tail -50
