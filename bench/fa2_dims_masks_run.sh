#!/usr/bin/env bash
# Issue 14's bar at one library, in one device call (2026-12-02, library of 1d2a76e): FlashAttention-2's
# matrix (bench/fa2_matrix.sh, dropout 0) at the head dims whose Hopper backward route changed since the
# whole matrix ran (32 on the d32 kernel of branch d32bwd, 40 and 59 on d64, 111 on d128: branch
# paddims), then the mask-cost rows (bench/compare_masks.py forward and --backward), after the
# shards so that nothing else shares the GPU while they are timed.
#   bench/fa2_dims_masks_run.sh TARBALL [STEP,STEP,...]
# TARBALL: bench/pack_final.sh's, with libflashbox.so and fa2/test_flash_attn.py (FA2_TEST=...).
# The FA2 slice runs as three fa2_matrix runs, each its own step with its own limit, so that the small
# functions cannot be cut off behind the two large ones (an earlier slice run lost race_condition,
# bwd_transpose and bwd_overflow that way): 1. the eight small functions, 2. test_flash_attn_output,
# 3. test_flash_attn_varlen_output; then 4. bwd_overflow and bwd_transpose at their own head dims 16,
# 64, 128 (none of bwd_transpose's is in 32,40,59,111; 16 is on the d32 kernel now, 128 bf16 on DQLAG).
# A group's limit is what is left before the masks' reserve (MASKS_RESERVE_S), capped per group.
# The device copies main's checkout, not a branch's worktree: copy this script,
# device_steps.sh and the tarball into an ignored .carry/NAME/ there, carry it, and run
# `bash .carry/NAME/fa2_dims_masks_run.sh .carry/NAME/x.tar.gz` (bench/ itself is main's).
# What comes back: run.log, compare_masks_{fwd,bwd}.json and GROUP.json, each group's merged matrix
# (at most 8 files come back: the shards' tarballs and oom lists stay there; the 2026-12-02 run of
# f8f0797's version lost two groups' matrix.json to that limit, their summaries are in run.log).
set -u
. "$(dirname "$0")/device_steps.sh" "$1" fa2dims "${2:-all}"
begin_call "${CALL_S:-410}"
FA2_END=$(( DEADLINE - ${MASKS_RESERVE_S:-55} ))
SHARDS=${FA2_SHARDS:-16}
DIMS=${FA2_DIMS:-32,40,59,111}
export PYTHONPATH=bench/fa2_compat:python:tests/python FA2_RETRY_S=${FA2_RETRY_S:-25}

# fa2 NAME DIMS FUNCTIONS CAP KEEP SHARDS: one fa2_matrix run of at most CAP seconds and what is left
# before FA2_END less KEEP (the time the groups after it need); an outer timeout in case the merge hangs.
fa2() {
  local name=$1 dims=$2 funcs=$3 cap=$4 keep=$5 n=$6
  local limit=$(( FA2_END - $(date +%s) - keep ))
  (( limit > cap )) && limit=$cap
  if (( limit < 10 )); then echo "== $name skipped (no time left)" | tee -a "$log"; return 0; fi
  echo "$name: shards cut off after $limit s" | tee -a "$log"
  step "$name" timeout $(( limit + 40 )) env FA2_HEAD_DIMS="$dims" FA2_FUNCTIONS="$funcs" \
    bash bench/fa2_matrix.sh "$B/fa2/test_flash_attn.py" "$O/$name" "$n" "$limit"
  mv "$O/$name/matrix.json" "$O/$name.json" 2>/dev/null
  [ -n "${FA2_KEEP_SHARDS:-}" ] || rm -rf "${O:?}/$name"
}
fa2 fa2_small "$DIMS" test_flash_attn_bwd_overflow,test_flash_attn_race_condition,test_flash_attn_causal,test_flash_attn_varlen_causal,test_flash_attn_deterministic,test_flash_attn_qkvpacked,test_flash_attn_splitkv 140 240 "$SHARDS"
fa2 fa2_output "$DIMS" test_flash_attn_output 200 130 "$SHARDS"
fa2 fa2_varlen "$DIMS" test_flash_attn_varlen_output 200 20 "$SHARDS"
fa2 fa2_own_dims 16,64,128 test_flash_attn_bwd_overflow,test_flash_attn_bwd_transpose 40 0 8

# The cost bar: window 1024 (causal and two-sided, and the plain kernel at the same work), softcap 30,
# ALiBi against plain, D64 H12 and D128 H16, T 4096 and 16384, B4 bf16 (compare_masks.py's defaults).
tstep masks_fwd 45 python3 bench/compare_masks.py "$B/libflashbox.so" --seqlens 4096,16384 --windows 1024 \
  --json "$O/compare_masks_fwd.json"
tstep masks_bwd 45 python3 bench/compare_masks.py "$B/libflashbox.so" --backward --seqlens 4096,16384 --windows 1024 \
  --json "$O/compare_masks_bwd.json"
grep -E "^(==|rc=)|shards in|whole matrix|all functions|FAILED|retried" "$log" | tail -60
