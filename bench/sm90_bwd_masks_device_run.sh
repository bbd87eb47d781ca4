#!/usr/bin/env bash
# One device call for the sm90 backward with windows, softcap and ALiBi (2026-12-01): the new GPU
# tests, the whole test_backward, compute-sanitizer memcheck on the small masked cases, then the
# masked backward against the plain one (compare_masks.py --backward, TFLOP/s over visible pairs),
# the plain backward against cuDNN (compare_sdpa.py --backward), and the sm80 backward on the same
# masked variants for the before/after. Most important first; every step under its own limit.
#   bash bench/sm90_bwd_masks_device_run.sh TARBALL    (libflashbox.so, test_*, lib/ with libgomp)
set -u
O=${OUT:-/tmp/bwd_masks_out}; mkdir -p "$O"
B=/tmp/fb_bwd_masks; rm -rf $B; mkdir -p $B && tar -xzf "$1" -C $B
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=16
log="$O/run.log"
# Every step's output goes into run.log (at most 8 files come back from $OUT: run.log and the JSONs).
step() {
  local name=$1 s=$(date +%s); shift
  echo "== $name" | tee -a "$log"; "$@" >> "$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"
step test_sm90_bwd_mods timeout 60 $B/test_sm90_bwd_mods
# Only when that failed: the same small cases on the sm80 backward (is it the kernel or the test?).
tail -1 "$log" | grep -q "^rc=0 " || step test_sm90_bwd_mods_on_sm80 timeout 20 env FLASHBOX_BWD_ARCH=sm80 \
  $B/test_sm90_bwd_mods --gtest_filter=Sm90BwdMods.SmallCases
step test_backward timeout 60 $B/test_backward --gtest_brief=1
# The extension's GPU cases (tests/cuda/ext_sm80_test.cpp): those at head_dim 64/128 now run the sm90
# backward, varlen and the other head dims the sm80 one.
[ -x $B/test_cuda ] && step ext_cuda timeout 30 $B/test_cuda --gtest_filter='ExtSm80.*'
step memcheck timeout 40 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_mods --gtest_filter=Sm90BwdMods.SmallCases
step compare_masks_bwd timeout 50 python3 bench/compare_masks.py $B/libflashbox.so --backward --seqlens 4096,16384 \
  --windows 1024 --json "$O/compare_masks_bwd.json"
# The plain backward of this build against main's (old/, 1874610) and cuDNN, interleaved, same tensors;
# the forward (identical code in both) gives the run's noise.
[ -f $B/old/libflashbox.so ] && step compare_builds timeout 50 python3 bench/compare_builds.py new=$B/libflashbox.so \
  old=$B/old/libflashbox.so --rounds 3 --shapes 64:12:4096:1,64:12:16384:1,128:16:4096:1,128:16:16384:1 \
  --json "$O/compare_builds.json"
step compare_masks_bwd_sm80 timeout 25 env FLASHBOX_BWD_ARCH=sm80 python3 bench/compare_masks.py $B/libflashbox.so \
  --backward --seqlens 16384 --windows 1024 --only plain,softcap30,window1024,alibi --json "$O/compare_masks_bwd_sm80.json"
step compare_sdpa_bwd timeout 30 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --backward \
  --seqlens 4096,16384 --json "$O/compare_sdpa_bwd.json"
grep -E "^(==|rc=)|FAILED|PASSED|ERROR SUMMARY|TFLOP/s|worst" "$log" | cut -c1-220
