#!/usr/bin/env bash
# One device call for the Hopper backward's versions (issue 15): the gradient tests on the new build
# (sm90 path, both dQ modes), the forward suite, then bench/sm90_bwd_variants.py (the earlier build
# against the new one, non-deterministic and deterministic, interleaved with cuDNN; per-kernel
# profile at short T), compute-sanitizer memcheck and racecheck on small shapes, and the SASS
# instruction mix of the sm90 backward kernels. Prebuilt binaries come as a tarball built on the CPU
# machine: libflashbox.so, base/libflashbox.so (the build compared against), v8/, v8b/, v9a/
# libflashbox.so (intermediate versions, those there), test_backward,
# test_sm90, flashbox (the CLI, for the profile), lib/ (libgomp, libopenblas and its Fortran run time).
#   bash bench/sm90_bwd_device_run.sh bwd.tar.gz [STEP,STEP,...]   (default: every step)
# Every step has its own time limit; logs go to $OUT.
set -u
. "$(dirname "$0")/device_steps.sh" "$1" bwd "${2:-all}"
export OMP_NUM_THREADS=16
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee -a "$log"
small='CudaBackward.StridedLayoutsAndScale:CudaBackward.EmptyRowsGiveZeroDq:CudaBackward.HopperRunsTheSm90Kernels'
step test_backward timeout 120 $B/test_backward --gtest_brief=1
mids=; for v in v8 v8b v9a v9; do [ -f $B/$v/libflashbox.so ] && mids="$mids $v=$B/$v/libflashbox.so"; done
step variants timeout 170 python3 bench/sm90_bwd_variants.py base=$B/base/libflashbox.so $mids new=$B/libflashbox.so \
  --det new --rounds 3 --profile 1024,2048 --json "$O/variants.json"
# A short check of one change (steps test_cuda, variants_short): the GPU tests only, and the builds
# against each other in both dQ modes without cuDNN, two rounds.
step test_cuda timeout 100 $B/test_backward --gtest_brief=1 --gtest_filter='*Cuda*:BackwardApi.*'
step variants_short timeout 90 python3 bench/sm90_bwd_variants.py $mids new=$B/libflashbox.so \
  --det ${DET:-new} --rounds 2 --no-cudnn --json "$O/variants_short.json"
step memcheck timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter="$small"
step racecheck timeout 45 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_backward --gtest_brief=1 \
  --gtest_filter='CudaBackward.EmptyRowsGiveZeroDq:CudaBackward.HopperRunsTheSm90Kernels'
# Where the consumer warps stall (Nsight Compute, one launch of the D128 T4096 backward kernel): the
# warp-state section and the per-instruction stall samples, the 40 most sampled instructions kept.
stalls() {
  timeout 80 ncu --clock-control none --section WarpStateStats --section SchedulerStats --section SourceCounters \
    -k regex:flash_bwd_sm90_kernel -c 1 -f -o /tmp/bwd_d128 $B/flashbox bench --device cuda --backward --impls flash \
    --seqlens 4096 --head-dim 128 --heads 16 --repeats 1 --warmup 0 > /dev/null || return 1
  ncu -i /tmp/bwd_d128.ncu-rep --page details > "$O/ncu_bwd_d128_details.txt"
  ncu -i /tmp/bwd_d128.ncu-rep --page source --csv --print-source sass > /tmp/bwd_src.csv
  gzip -c /tmp/bwd_src.csv > "$O/ncu_bwd_d128_source.csv.gz"
  python3 - /tmp/bwd_src.csv > "$O/ncu_bwd_d128_top_stalls.txt" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
h = rows[0]
key = next((i for i, c in enumerate(h) if c.startswith("Warp Stall Sampling (All")), None)
cols = [i for i, c in enumerate(h) if c.startswith("stall_") or "Stall" in c]
print(" | ".join(h[i] for i in [0, 1] + ([key] if key is not None else [])))
body = rows[1:]
if key is not None:
    body.sort(key=lambda r: -float(r[key] or 0))
for r in body[:40]:
    print(r[0], "|", r[1].strip(), "|", r[key] if key is not None else "")
PY
}
step test_sm90 timeout 40 $B/test_sm90 --gtest_brief=1
step stalls stalls

sass() {
  cuobjdump --dump-sass $B/libflashbox.so | awk '/Function :/{f=$3} {print f"\t"$0}' | grep flash_bwd_sm90_kernel > /tmp/bwd90.sass
  for f in $(cut -f1 /tmp/bwd90.sass | sort -u); do printf '%s\n ' "$f"; for op in HGMMA MUFU.EX2 BAR.SYNC UBLKRED SYNCS LDL STL RED; do
    printf '%s=%s ' $op $(grep -F "$f" /tmp/bwd90.sass | grep -c " $op"); done; echo; done
}
step sass sass
grep -E "^(==|rc=)|TFLOP/s|bitwise|ERROR|FAILED|PASSED|ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -60
