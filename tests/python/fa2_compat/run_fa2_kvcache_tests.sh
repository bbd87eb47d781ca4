#!/usr/bin/env bash
# FlashAttention-2's KV-cache tests (tests/test_flash_attn.py) against flashbox (flash_attn names of
# tests/python/fa2_compat over flashbox.kvcache), on a CUDA machine:
#   FA2_TEST_FILE=path/to/test_flash_attn.py bash tests/python/fa2_compat/run_fa2_kvcache_tests.sh [results-dir]
# test_flash_attn_kvcache has 304,128 parameter combinations, more than a device call can run (pytest
# alone needs minutes to generate them): tests/python/fa2_compat/fa2_direct.py calls the test functions themselves on a
# seeded shuffle of their grids for FA2_KV_SECONDS each (default 60; seed FA2_KV_SEED, default 0).
# The test file is FlashAttention-2's (public; never commit it here).
set -uo pipefail
cd "$(dirname "$0")/../../.."
RESULTS=${1:-fa2-kvcache-results}
mkdir -p "$RESULTS"
TEST_FILE=${FA2_TEST_FILE:?set FA2_TEST_FILE to the path of FlashAttention-2 tests/test_flash_attn.py}
: "${FLASHBOX_LIBRARY:?set FLASHBOX_LIBRARY to a CUDA build of libflashbox.so}"
export PYTHONPATH=$PWD/tests/python/fa2_compat:$PWD/python:$PWD/tests/python PYTHONUNBUFFERED=1
timeout $(( 3 * ${FA2_KV_SECONDS:-60} + 60 )) "${PYTHON:-python3}" tests/python/fa2_compat/fa2_direct.py "$TEST_FILE" \
  --functions test_flash_attn_kvcache,test_flash_attn_kvcache_paged_block_table_bounds,test_flash_attn_varlen_paged_kv_num_splits \
  --seconds "${FA2_KV_SECONDS:-60}" --seed "${FA2_KV_SEED:-0}" --json "$RESULTS/fa2_kvcache.json" 2>&1 | tee "$RESULTS/fa2_kvcache.log"
