#!/usr/bin/env bash
# One device call for branch gqa (bench/NOTES.md, sm90 backward "(branch gqa, 2026-12-01)"), most
# important first, every step under its own limit (SECONDS in all, default 140):
#   gqa      bench/sm90_bwd_variants.py, one library under several environments, and cuDNN, 3 rounds:
#            the chunk rule (new = the gqa rule, v18 = FLASHBOX_SM90_BWD_CHUNK_RULE=v18) and forced
#            chunk sizes (c2, c8: FLASHBOX_SM90_BWD_CHUNK_HEADS) at GQA 32/8 D128 / D64 T8192 causal
#            and the MHA controls D128 H16 / D64 H12 T8192; new and v18 also deterministic
#   d64det   D64 H12 causal T = 1024..16384, deterministic in v9's order (new) and v10's
#            (q64: FLASHBOX_SM90_BWD_D64_QDESC=1, the QDESC d64 kernel), 50-run bitwise on q64 T1024
#   test_gpu every GPU test of test_backward (default settings)
# Packing, on the CPU machine:
#   cd /work/wt/gqa && rm -rf /work/main/.carry/gqa && mkdir -p /work/main/.carry/gqa/src && \
#     git archive HEAD | tar -x -C /work/main/.carry/gqa/src && \
#     bash bench/sm90_bwd_gqa_device_run.sh --pack /work/main/.carry/gqa/gqa.tar.gz build-cuda
# Device call:
#   run(command="cd .carry/gqa/src && bash bench/sm90_bwd_gqa_device_run.sh ../gqa.tar.gz 140",
#       carry=[".carry/gqa"], timeout_s=150)
set -u
tests="tests/test_backward"
[ "${1:-}" = "--pack" ] && exec bash "$(dirname "$0")/pack_final.sh" "$2" "${3:-build-cuda}" $(for t in $tests; do basename $t; done)
. "$(dirname "$0")/device_steps.sh" "$1" gqa "${3:-all}"
begin_call ${2:-140}
L=$B/libflashbox.so
tstep gqa 45 python3 bench/sm90_bwd_variants.py new=$L v18=$L c2=$L c8=$L --det new,v18 --rounds 3 \
  --env v18:FLASHBOX_SM90_BWD_CHUNK_RULE=v18 --env c2:FLASHBOX_SM90_BWD_CHUNK_HEADS=2 \
  --env c8:FLASHBOX_SM90_BWD_CHUNK_HEADS=8 \
  --shapes 128:32:8192:1:8,64:32:8192:1:8,128:16:8192:1,64:12:8192:1 --repeat-check none \
  --json "$O/gqa.json"
tstep d64det 40 python3 bench/sm90_bwd_variants.py new=$L q64=$L --det new,q64 --rounds 3 --no-cudnn \
  --env q64:FLASHBOX_SM90_BWD_D64_QDESC=1 \
  --shapes "$(for t in 1024 2048 4096 8192 16384; do printf '64:12:%s:1,' $t; done | sed 's/,$//')" \
  --repeat-check 64:12:1024:1 --json "$O/d64det.json"
tstep test_gpu 75 $B/test_backward --gtest_filter='*Cuda*:BackwardApi.*' --gtest_brief=1
grep -E "^(==|rc=)|bitwise|^D(64|128) |cudnn:|ERROR|FAILED|PASSED|Traceback" "$log" | tail -60
