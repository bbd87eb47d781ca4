#!/usr/bin/env bash
# A measurement of 2026-12-02 (the library of ee9b305; bench/NOTES.md, "the windows on both d128
# schedules"), packed with PACK_NO_BUILD=1 bench/pack_final.sh .carry/last/x.tar.gz build-cuda test_sm90_bwd_d96
# and run as run(command="bash bench/windows_dtype_bar_device_run.sh .carry/last/x.tar.gz 150", carry=[".carry/last"]): the sm90
# backward's windows on the bf16 d128 kernel (DQLAG) against the fp16 one (the plain schedule), the
# bar's rows of issue 15 (causal sweep again, non-causal D128 16384, GQA 32/8 at 8192).
set -u
. bench/device_steps.sh "$1" last all
begin_call ${2:-150}
for dt in bf16 fp16; do
  tstep masks_$dt 30 python3 bench/compare_masks.py $B/libflashbox.so --backward --dtype $dt --configs 128:16 \
    --seqlens 4096,16384 --windows 1024 --json "$O/masks_bwd_$dt.json"
done
tstep variants 70 python3 bench/sm90_bwd_variants.py new=$B/libflashbox.so --rounds 5 \
  --shapes 128:16:16384:0,128:32:8192:1:8,64:32:8192:1:8,64:12:4096:1,128:16:4096:1 --json "$O/variants_bar.json"
tstep compare_bwd 30 python3 bench/compare_sdpa.py $B/libflashbox.so --no-naive --backward \
  --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_bwd_2.json"
grep -E "^(==|rc=)|\| new|TFLOP" "$log" | tail -60
