#!/usr/bin/env bash
# One device call for branch sm90-bwd-det-walk (bench/NOTES.md, sm90 backward "v15: the deterministic
# order per problem"): the deterministic tests of test_backward (both orders, 50 runs bitwise, the
# kernel names the order the plan picked), the masked backward's tests (their deterministic runs
# take v10's order at bf16 d128 / GQA d64 now, windows included), compute-sanitizer memcheck and
# racecheck on small deterministic shapes of both orders, and the backward timed non-deterministic
# and deterministic in one process (bench/sm90_bwd_variants.py: D64 H12 and D128 H16 at T = 1024 ..
# 16384 causal, non-causal D128 16384, GQA 32/8 D128 and D64 8192), against an earlier build when the
# tarball has old/libflashbox.so (main's: "non-deterministic unchanged", and v9's deterministic
# order at the same shapes). At most SECONDS (190) in all; most important first.
#
# Packing, on the CPU machine (builds BUILD, default build-cuda, configured for 90a; OLD_LIB: an
# optional libflashbox.so of main to time against):
#   OLD_LIB=/work/main/build/libflashbox.so bash bench/sm90_bwd_det_walk_device_run.sh --pack \
#     /work/main/.carry/detwalk/detwalk.tar.gz [BUILD]
#   (with the source: rm -rf /work/main/.carry/detwalk && mkdir -p /work/main/.carry/detwalk/src &&
#    git archive HEAD | tar -x -C /work/main/.carry/detwalk/src, before --pack)
# Device call:
#   run(command="cd .carry/detwalk/src && bash bench/sm90_bwd_det_walk_device_run.sh ../detwalk.tar.gz",
#       carry=[".carry/detwalk"], timeout_s=200)
set -u
if [ "${1:-}" = "--pack" ]; then
  out=$2 build=${3:-build-cuda}
  nice ninja -C "$build" -j2 libflashbox.so test_backward test_sm90_bwd_mods || exit 1
  P=$(mktemp -d); mkdir -p $P/lib
  cp "$build/libflashbox.so" "$build/tests/test_backward" "$build/tests/sm90/test_sm90_bwd_mods" $P/ || exit 1
  for l in libgomp.so.1 libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do cp -L /lib/x86_64-linux-gnu/$l $P/lib/; done
  if [ -n "${OLD_LIB:-}" ]; then mkdir -p $P/old && cp "$OLD_LIB" $P/old/libflashbox.so; fi
  mkdir -p "$(dirname "$out")" && tar -czf "$out" -C $P . && rm -rf $P && ls -la "$out"
  exit 0
fi
O=${OUT:-/tmp/detwalk_out}; mkdir -p "$O"
B=/tmp/detwalk; mkdir -p $B && tar -xzf "$1" -C $B
DEADLINE=$(( $(date +%s) + ${2:-190} ))
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/libflashbox.so PYTHONPATH=python
log="$O/run.log"
step() {  # step NAME LIMIT CMD...: at most LIMIT seconds and what is left of the call's
  local name=$1 limit=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) - 2 ))
  (( left < limit )) && limit=$left
  if (( limit < 5 )); then echo "== $name skipped (no time left)" | tee -a "$log"; return 0; fi
  local s=$(date +%s); echo "== $name (limit $limit s)" | tee -a "$log"
  timeout $limit "$@" >>"$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee -a "$log"
# Correctness first: both orders bitwise over 50 runs and against the fp64 reference, the names.
step test_det 60 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.Deterministic*:CudaBackward.HopperRunsTheSm90Kernels'
# The speed: every build non-deterministic, then deterministic, interleaved, two rounds (no cuDNN:
# the ratio to the non-deterministic build is the bar).
builds="new=$B/libflashbox.so" det=new
[ -f $B/old/libflashbox.so ] && builds="$builds old=$B/old/libflashbox.so" det=new,old
# Shapes: the script's default list (D64 H12, D128 H16 causal T = 1024 .. 16384, non-causal D128 16384,
# GQA 32/8 D128 8192) and GQA 32/8 D64 8192 (v10's order at head_dim 64, never timed before).
shapes_v=$(for t in 1024 2048 4096 8192 16384; do printf '64:12:%s:1,' $t; done; \
  for t in 1024 2048 4096 8192 16384; do printf '128:16:%s:1,' $t; done; echo '128:16:16384:0,128:32:8192:1:8,64:32:8192:1:8')
# 50-run bitwise checks on three of them: v9's order (D64 MHA), v10's (D128 MHA, D64 GQA).
step variants 90 python3 bench/sm90_bwd_variants.py $builds --det $det --rounds 2 --no-cudnn \
  --shapes "$shapes_v" --repeat-check 64:12:4096:1,128:16:2048:1,64:32:8192:1:8 --json "$O/variants.json"
step test_sm90_bwd_mods 20 $B/test_sm90_bwd_mods --gtest_brief=1
# compute-sanitizer on small shapes of both orders: the masked backward's small cases (bf16 GQA d64
# and d128: v10's order with windows; bf16 MHA d64 and fp16: v9's) and the plain shapes of
# test_backward with several key blocks (causal, bf16: v10's, fp16: v9's; d128 MHA 129, d64 GQA 3 200x333).
step memcheck 20 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_mods --gtest_brief=1 --gtest_filter='Sm90BwdMods.SmallCases'
shapes='Shapes/CudaBackwardShapes.BothModesMatchReference'
step racecheck 25 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter="$shapes/22:$shapes/23:$shapes/42:$shapes/43"
grep -E "^(==|rc=)|bitwise|^D(64|128) |ERROR|FAILED|RACECHECK SUMMARY|ERROR SUMMARY" "$log" | tail -60
