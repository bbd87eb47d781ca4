#!/usr/bin/env bash
# One device call for the decode family (issue 19): the decode tests, compute-sanitizer memcheck of the
# paged cases, and the decode benchmark, each with its own time limit, logs under $OUT. The binaries
# come prebuilt as a tarball (libflashbox.so + test_decode, built on the CPU machine with
# -DFLASHBOX_CUDA_ARCHS=90a and `carry`ed):
#   bash bench/decode_device_run.sh .dev/decode.tar.gz [bench args...]
set -u
O=${OUT:-/tmp/decode_out}; mkdir -p "$O"
B=/tmp/fbdec; mkdir -p $B && tar -xzf "$1" -C $B
shift
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/libflashbox.so PYTHONPATH=python
log="$O/run.log"
step() {
  local s=$(date +%s); echo "== $1" | tee -a "$log"; shift; "$@" >>"$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"
step test_decode timeout 40 sh -c "$B/test_decode --gtest_brief=1 > '$O/test_decode.log' 2>&1"
step memcheck timeout 45 sh -c "compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_decode --gtest_brief=1 \
  --gtest_filter='Layouts/KvcacheCuda.MatchesReference/paged16_d128_h8_2:KvcacheCudaRefuses.*:KvcacheCudaShapes.Rotary' \
  > '$O/memcheck.log' 2>&1"
step bench timeout 75 sh -c "python3 bench/decode_bench.py --json '$O/decode_bench.json' $* > '$O/decode_bench.log' 2>&1"
# Where one steady-state launch (B32 x 4k, one split, 256 CTAs) spends its time. (The ring-depth
# experiment of run 2 looped over FLASHBOX_DECODE_STAGES here; the switch is gone since 2e8229e.)
step ncu timeout 60 sh -c "ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy \
  --section MemoryWorkloadAnalysis -k regex:decode_split -s 2 -c 1 python3 bench/decode_bench.py --profile 32,4096 > '$O/ncu.txt' 2>&1"
step pytest timeout 20 python3 -m pytest -q -rs tests/python/test_kvcache.py
tail -5 "$O/test_decode.log"; tail -3 "$O/memcheck.log"; grep -v Warning "$O/decode_bench.log" | grep -v "return F.scaled"; grep -E "Duration|Throughput|Stall|Warp Cycles|Issued|Achieved" "$O/ncu.txt" | head -30
grep -E "^(==|rc=)" "$log"
