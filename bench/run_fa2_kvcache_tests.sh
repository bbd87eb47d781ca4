#!/usr/bin/env bash
# FlashAttention-2's KV-cache tests (tests/test_flash_attn.py) against flashbox (flash_attn names of
# bench/fa2_compat over flashbox.kvcache), on a CUDA machine:
#   FA2_TEST_FILE=path/to/test_flash_attn.py bash bench/run_fa2_kvcache_tests.sh [results-dir]
# test_flash_attn_kvcache has ~300k parameter combinations, more than a device call can run (pytest
# alone needs minutes to generate them): bench/fa2_compat/run_sampled.py calls the test function on a
# seeded sample of its grid (FA2_KV_SAMPLE cases, default 400; seed FA2_KV_SEED, default 0). The two
# small tests run whole. The test file is FlashAttention-2's (public; never commit it here).
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-${OUT:-/tmp/fa2_kvcache}}
mkdir -p "$RESULTS"
TEST_FILE=${FA2_TEST_FILE:?set FA2_TEST_FILE to the path of FlashAttention-2 tests/test_flash_attn.py}
PY=${PYTHON:-python3}
: "${FLASHBOX_LIBRARY:?set FLASHBOX_LIBRARY to a CUDA build of libflashbox.so}"
export PYTHONPATH=$PWD/bench/fa2_compat:$PWD/python:$PWD/tests/python PYTHONUNBUFFERED=1
run() {  # name timeout function [run_sampled args]
  local name=$1 limit=$2 fn=$3; shift 3
  timeout "$limit" "$PY" bench/fa2_compat/run_sampled.py "$TEST_FILE" "$fn" --log "$RESULTS/$name.json" "$@" \
    > "$RESULTS/$name.log" 2>&1
  echo "$name (rc $?): $(tail -1 "$RESULTS/$name.log")" | tee -a "$RESULTS/summary.txt"
}
run kvcache "${FA2_KV_TIMEOUT:-300}" test_flash_attn_kvcache --sample "${FA2_KV_SAMPLE:-400}" --seed "${FA2_KV_SEED:-0}"
run kvcache_paged_bounds 60 test_flash_attn_kvcache_paged_block_table_bounds --sample 100
run varlen_paged_num_splits 60 test_flash_attn_varlen_paged_kv_num_splits --sample 100
