#!/usr/bin/env bash
# Every GPU check of the library at one commit, in one call on the H200: the main job on the GPU (flashbox
# report: check, bench incl. backward, GPT-2 124M), flashbox vs PyTorch SDPA forward and backward in
# one process (compare_sdpa.py), naive's out-of-memory row, the Python package's tests, the GPU
# test suites (test_backward, test_cuda, test_sm90), compute-sanitizer, and the forward kernels'
# local-memory instructions with their execution counts. Prebuilt binaries come as a tarball (built on
# the CPU machine, `carry`ed):
#   bench/device_final_run.sh .dev/final.tar.gz [STEP,STEP,...]   (default: every step)
# FA2_SECONDS (15) and FA2_FUNCTIONS (bench/fa2_direct.py's list) size the fa2_direct step; FA2_SHARDS and
# FA2_MATRIX_S the fa2_matrix step (the whole matrix, several minutes: name it, or run "all"); FA2_DIMS,
# FA2_DIMS_FUNCTIONS and FA2_DIMS_S the fa2_matrix_dims step (the matrix's slice at the given head dims).
# (the tarball: libflashbox.so, test_* binaries, flashbox, lib/ with libgomp; optional old/ and fa2/)
# Every step has its own time limit so one hang costs a step, not the call. Logs go to $OUT.
set -u
. "$(dirname "$0")/device_steps.sh" "$1" final "${2:-all}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"

# Most important first: if the device budget ends mid-call, what ran is still under $OUT.
step test_backward timeout 150 $B/test_backward --gtest_brief=1
step test_cuda timeout 120 $B/test_cuda --gtest_brief=1
step test_sm90 timeout 60 $B/test_sm90 --gtest_brief=1
[ -x $B/test_sm90_mods ] && step test_sm90_mods timeout 60 $B/test_sm90_mods --gtest_brief=1
[ -x $B/test_sm90_bwd_mods ] && step test_sm90_bwd_mods timeout 90 $B/test_sm90_bwd_mods --gtest_brief=1
[ -x $B/test_sm90_bwd_d256 ] && step test_sm90_bwd_d256 timeout 60 $B/test_sm90_bwd_d256 --gtest_brief=1
[ -x $B/test_sm90_bwd_d192 ] && step test_sm90_bwd_d192 timeout 60 $B/test_sm90_bwd_d192 --gtest_brief=1
[ -x $B/test_sm90_bwd_d96 ] && step test_sm90_bwd_d96 timeout 40 $B/test_sm90_bwd_d96 --gtest_brief=1
[ -x $B/test_sm90_bwd_pad_dims ] && step test_sm90_bwd_pad_dims timeout 40 $B/test_sm90_bwd_pad_dims --gtest_brief=1
[ -x $B/test_sm90_varlen ] && step test_sm90_varlen timeout 60 $B/test_sm90_varlen --gtest_brief=1
[ -x $B/test_sm90_bwd_varlen ] && step test_sm90_bwd_varlen timeout 60 $B/test_sm90_bwd_varlen --gtest_brief=1
[ -x $B/test_decode ] && step test_decode timeout 90 $B/test_decode --gtest_brief=1
[ -x $B/test_gpt2 ] && step test_gpt2_cuda timeout 120 $B/test_gpt2 --gtest_brief=1 --gtest_filter='CudaTrainer.*:CudaForward.*'
[ -x $B/test_context_parallel ] && step test_context_parallel timeout 90 $B/test_context_parallel --gtest_brief=1
# compute-sanitizer on the small cases of the extension: head dims above 128 (sm80 d256), Hopper varlen.
step memcheck_ext timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_cuda --gtest_brief=1 \
  --gtest_filter='ExtSm80.HeadDimsAbove128:ExtSm80.SmallCases'
[ -x $B/test_sm90_bwd_d256 ] && step memcheck_bwd_d256 timeout 40 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $B/test_sm90_bwd_d256 --gtest_brief=1 --gtest_filter='Sm90BwdD256.SmallCases'
[ -x $B/test_sm90_bwd_d192 ] && step memcheck_bwd_d192 timeout 40 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $B/test_sm90_bwd_d192 --gtest_brief=1 --gtest_filter='Sm90BwdD192.SmallCases'
[ -x $B/test_sm90_bwd_d96 ] && step memcheck_bwd_d96 timeout 30 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $B/test_sm90_bwd_d96 --gtest_brief=1 --gtest_filter='Sm90BwdD96.SmallCases'
[ -x $B/test_sm90_bwd_pad_dims ] && step memcheck_bwd_pad_dims timeout 30 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $B/test_sm90_bwd_pad_dims --gtest_brief=1 --gtest_filter='Sm90BwdPadDims.SmallCases'
[ -x $B/test_sm90_varlen ] && step memcheck_varlen timeout 60 env FLASHBOX_SM90_VARLEN_SMALL=1 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $B/test_sm90_varlen --gtest_brief=1 \
  --gtest_filter='Sm90Varlen.TileEdges:Sm90Varlen.DifferentLengths:Sm90Varlen.MalformedCuSeqlensStayInBounds:Sm90Varlen.WindowsSoftcapAlibi'
[ -x $B/test_sm90_mods ] && step memcheck_mods timeout 60 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $B/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.GroupsSkipBlocksTheyDoNotSee:Sm90Mods.SlidingWindow'
[ -x $B/test_sm90_bwd_varlen ] && step memcheck_varlen_bwd timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_varlen --gtest_brief=1 --gtest_filter='Sm90BwdVarlen.SmallDifferentLengths:Sm90BwdVarlen.SmallWindowsSoftcapAlibi'
# The extension's speed: a packed varlen batch against the sum of its fixed-length calls (and sm80),
# the masked backward against the plain one at the same work (issue 14's cost bars).
[ -x $B/sm90_varlen_bench ] && step varlen_bench timeout 40 $B/sm90_varlen_bench --json "$O/varlen_bench.json"
# The same for the backward (bench/sm90_bwd_varlen_bench.cpp): a B = 8 pack of 512..8192 and a GPT-style
# pack of 16 ~1000-token documents, and the deterministic mode on the B = 8 pack.
if [ -x $B/sm90_bwd_varlen_bench ]; then
  step varlen_bwd_bench timeout 25 $B/sm90_bwd_varlen_bench --json "$O/varlen_bwd_b8.json"
  step varlen_bwd_bench_gpt timeout 20 $B/sm90_bwd_varlen_bench \
    --lens 1024,812,1300,977,700,1150,1024,890,1210,760,1024,1099,930,1280,705,1019 --json "$O/varlen_bwd_gpt.json"
  step varlen_bwd_bench_det timeout 15 $B/sm90_bwd_varlen_bench --deterministic --json "$O/varlen_bwd_b8_det.json"
fi
# The Hopper d192 and d256 backward (head dims 136..192, 200..256) against cuDNN and the sm80 backward that ran before.
step compare_bwd_d256 timeout 60 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --backward --configs 256:8,192:8 \
  --seqlens 1024,2048,4096,8192,16384 --also-families sm80 --json "$O/compare_bwd_d256.json"
step compare_masks_bwd timeout 60 python3 bench/compare_masks.py $B/libflashbox.so --backward --seqlens 4096,16384 \
  --windows 1024 --json "$O/compare_masks_bwd.json"
# The sm80 families of this build against the earlier one (both read the family from the environment).
[ -f $B/old/libflashbox.so ] && step compare_builds_sm80 timeout 90 env FLASHBOX_FLASH_ARCH=sm80 FLASHBOX_BWD_ARCH=sm80 \
  python3 bench/compare_builds.py new=$B/libflashbox.so old=$B/old/libflashbox.so --rounds 2 \
  --shapes 64:12:4096:1,128:16:4096:1,128:16:16384:1 --json "$O/compare_builds_sm80.json"
step compare_fwd timeout 90 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_fwd.json"
step compare_fwd_noncausal timeout 40 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --non-causal --seqlens 16384 --json "$O/compare_fwd_noncausal.json"
# A refactor's check: this build against an earlier one ($B/old/libflashbox.so, when the tarball has it),
# forward and backward interleaved with cuDNN on the same tensors (bench/compare_builds.py).
[ -f $B/old/libflashbox.so ] && step compare_builds timeout 150 python3 bench/compare_builds.py new=$B/libflashbox.so \
  old=$B/old/libflashbox.so --json "$O/compare_builds.json"
step compare_bwd timeout 60 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --backward --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_bwd.json"
step memcheck timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.StridedLayoutsAndScale:CudaBackward.EmptyRowsGiveZeroDq:CudaBackward.HopperRunsTheSm90Kernels'
step memcheck_fwd timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_sm90 --gtest_brief=1 \
  --gtest_filter='Sm90.SmallShapes:Sm90.DifferentQueryAndKeyLengths:Sm90.PersistentManyTilesPerCta:Sm90.OptimisticSoftmaxFallback'
# Local-memory traffic of the forward kernels: executions of every LDL/STL (Nsight Compute source
# counters, one launch of the head_dim 128 and 64 defaults); a count per tile, not per K block, means
# the main loop is clean.
spills() {
  for d in 128 64; do
    timeout 60 ncu --section SourceCounters -k regex:flash_fwd_sm90 -c 1 -f -o /tmp/spills_d$d $B/flashbox bench --device cuda \
      --impls flash --seqlens 4096 --head-dim $d --heads 16 --repeats 1 --warmup 0 > /dev/null || return 1
    ncu -i /tmp/spills_d$d.ncu-rep --page source --csv --print-source sass | python3 -c '
import csv, sys
rows = [r for r in csv.reader(sys.stdin) if len(r) > 5]
ex = rows[0].index("Instructions Executed")
for r in rows[1:]:
    if any(op in r[1] for op in ("LDL", "STL", "HGMMA")): print(r[0], r[ex], r[1].strip())' > "$O/spills_d$d.txt"
  done
}
step spills spills
step pytest timeout 90 python3 -m pytest -q -rs tests/python
# FlashAttention-2's own test functions on a seeded sample (bench/fa2_direct.py), when the tarball
# carries its tests/test_flash_attn.py (fetched from Dao-AILab/flash-attention; never committed here).
if [ -f $B/fa2/test_flash_attn.py ]; then
  step fa2_direct timeout 200 env PYTHONPATH=bench/fa2_compat:python:tests/python python3 bench/fa2_direct.py \
    $B/fa2/test_flash_attn.py --seconds "${FA2_SECONDS:-15}" ${FA2_FUNCTIONS:+--functions "$FA2_FUNCTIONS"} --json "$O/fa2_direct.json"
  # The whole matrix, FA2_SHARDS (12) processes side by side, each cut off after FA2_MATRIX_S (400) s.
  step fa2_matrix env PYTHONPATH=bench/fa2_compat:python:tests/python bash bench/fa2_matrix.sh \
    $B/fa2/test_flash_attn.py "$O/fa2_matrix" "${FA2_SHARDS:-12}" "${FA2_MATRIX_S:-400}"
  # The slice of the matrix whose route changed (FA2_DIMS, default the head dims of the kernels added
  # since the whole matrix ran: 80, 96 on d96, 160, 192 on the d192 backward), FA2_DIMS_FUNCTIONS.
  step fa2_matrix_dims env PYTHONPATH=bench/fa2_compat:python:tests/python FA2_HEAD_DIMS="${FA2_DIMS:-80,96,160,192}" \
    FA2_FUNCTIONS="${FA2_DIMS_FUNCTIONS:-test_flash_attn_output,test_flash_attn_qkvpacked}" bash bench/fa2_matrix.sh \
    $B/fa2/test_flash_attn.py "$O/fa2_matrix_dims" "${FA2_SHARDS:-12}" "${FA2_DIMS_S:-200}"
  step fa2_kvcache timeout 240 env FA2_TEST_FILE=$B/fa2/test_flash_attn.py FA2_KV_SECONDS=40 bash bench/run_fa2_kvcache_tests.sh "$O/fa2_kvcache"
fi
step report timeout 120 $B/flashbox report --json "$O/report_h200.json"
step naive_oom sh -c "timeout 25 $B/flashbox bench --seqlens 16384,32768 --impls naive,flash --json > '$O/bench_oom.json'"
grep -E "^(==|rc=)" "$log" | tail -30
