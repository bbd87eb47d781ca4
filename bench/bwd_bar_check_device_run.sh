#!/usr/bin/env bash
# Issue 15's bar on one build, one device call (2026-12-03, main with the DQPAIR kernel):
#   bar           compare_sdpa.py --backward, causal D64 H12 / D128 H16, T 1024 ... 16384
#   bar_full      compare_sdpa.py --backward --non-causal, D128 H16 T 16384
#   gqa_det       sm90_bwd_variants.py, deterministic and not, and cuDNN: GQA 32/8 D128 and D64 T 8192,
#                 D128 causal T 1024 ... 16384, non-causal 16384, D64 causal 2048 and 16384; 50-run repeats
#   then bench/device_final_run.sh's test suites and compute-sanitizer steps.
# Packing: PACK_NO_BUILD=1 bash bench/pack_final.sh /tmp/check.tar.gz build-cuda flashbox test_backward test_cuda \
#   test_sm90 test_sm90_mods test_sm90_bwd_mods test_sm90_bwd_d256 test_sm90_bwd_d192 test_sm90_bwd_d96 \
#   test_sm90_bwd_pad_dims test_sm90_varlen test_sm90_bwd_varlen, stripped and re-packed as one xz stream
#   (.carry/lead/check.tar.xz, as bench/sm90_ptr_check_device_run.sh says).
# Device call: run(command="bash bench/bwd_bar_check_device_run.sh .carry/lead/check.tar.xz 580", carry=[".carry/lead"])
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" barcheck all
begin_call ${2:-580}
bwd_bar 60
tstep bar_full 30 python3 "$here/compare_sdpa.py" $B/libflashbox.so --backward --no-naive --non-causal --configs 128:16 \
  --seqlens 16384 --json "$O/compare_sdpa_bwd_full.json"
tstep gqa_det 120 python3 "$here/sm90_bwd_variants.py" new=$B/libflashbox.so --det new --rounds 3 \
  --shapes 128:32:8192:1:8,64:32:8192:1:8,128:16:1024:1,128:16:2048:1,128:16:4096:1,128:16:8192:1,128:16:16384:1,128:16:16384:0,64:12:2048:1,64:12:16384:1 \
  --json "$O/gqa_det.json"
final_suites
grep -E "^(==|rc=)|PASSED|FAILED|ERROR SUMMARY|^D(64|128) |^ *(64|128) " "$log" | tail -80  # (the suites log there too)
