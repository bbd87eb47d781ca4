#!/usr/bin/env bash
# FlashAttention-3's own hopper/test_flash_attn.py run against flashbox.flash_attn_interface (through
# the flash_attn_interface name of tests/python/fa3_compat), then flashbox's own test of the module,
# on a CUDA machine.
#
#   FA3_HOPPER_DIR=path/to/flash-attention/hopper bash tests/python/fa3_compat/run_fa3_tests.sh [results-dir]
#
# test_flash_attn.py, padding.py and test_util.py are copied from FA3_HOPPER_DIR into a scratch folder
# (FlashAttention-3's files, never committed here). libflashbox.so: $FLASHBOX_LIBRARY, else
# build/libflashbox.so; when none loads, the library is built into build/ (-DFLASHBOX_CUDA_ARCHS=90a,
# library target only). Each group runs under its own time limit (FA3_GROUP_TIMEOUT seconds, default
# 120) with pytest -v, so a group cut off still leaves its PASSED / FAILED lines in its log; the
# counts per group go to summary.txt; FA3_ONLY="name ..." runs only some groups.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
RESULTS=${1:-fa3-results}
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd)
HOPPER=${FA3_HOPPER_DIR:?set FA3_HOPPER_DIR to FlashAttention-3 hopper/ folder}
GROUP_TIMEOUT=${FA3_GROUP_TIMEOUT:-120}
PY=${PYTHON:-python3}

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
for f in test_flash_attn.py padding.py test_util.py; do
  cp "$HOPPER/$f" "$SCRATCH/" || { echo "no $f in $HOPPER"; exit 1; }
done
cp tests/python/fa3_compat/conftest_failures.py "$SCRATCH/conftest.py"  # a FAILREASON line per failure, at once

. tests/python/loadable_library.sh  # sets LIB
case $LIB in /*) ;; *) LIB=$PWD/$LIB ;; esac
export FLASHBOX_LIBRARY=$LIB PYTHONUNBUFFERED=1
export PYTHONPATH=$SCRATCH:$PWD/tests/python/fa3_compat:$PWD/tests/python/fa2_compat:$PWD/python:$PWD/tests/python
echo "library: $FLASHBOX_LIBRARY" | tee "$RESULTS/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee -a "$RESULTS/summary.txt"
env | grep '^FLASH_ATTENTION_' | sort | tee -a "$RESULTS/summary.txt"

# name | test function | pytest -k expression within it (a case's id begins with the values of the
# parametrize closest to the function: seqlen_q-seqlen_k-d). Naming the function keeps pytest from
# collecting the other functions' matrices.
GROUPS_=(
  "output_113x203|test_flash_attn_output|113-203-"
  "output_1024|test_flash_attn_output|1024-1024-"
  "varlen_113x203|test_flash_attn_varlen_output|113-203-"
  "varlen_small|test_flash_attn_varlen_output|1-3- or 3-513-"
  "kvcache_1x339|test_flash_attn_kvcache|1-339-"
  "kvcache_64x800|test_flash_attn_kvcache|64-800-"
  "combine|test_flash_attn_combine|"
  "combine_linearize|test_flash_attn_varlen_combine_linearize|"
  "cluster|test_flash_attn_cluster|"
  "bw_compatibility|test_flash3_bw_compatibility|"
)
ONLY=${FA3_ONLY:-}
cd "$SCRATCH"
for g in "${GROUPS_[@]}"; do
  IFS='|' read -r name fn expr <<< "$g"
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
  log="$RESULTS/fa3_$name.log"
  timeout "$GROUP_TIMEOUT" "$PY" -m pytest -v -p no:cacheprovider "test_flash_attn.py::$fn" ${expr:+-k "$expr"} > "$log" 2>&1
  rc=$?
  passed=$(grep -c " PASSED" "$log"); failed=$(grep -c " FAILED" "$log"); skipped=$(grep -c " SKIPPED" "$log")
  notimpl=$(grep -c "NotImplementedError: flashbox" "$log")
  echo "fa3 $name: $passed passed, $failed failed, $skipped skipped (rc $rc$([ $rc = 124 ] && echo ', cut off by the time limit'); NotImplementedError lines: $notimpl)" | tee -a "$RESULTS/summary.txt"
  # The most frequent reasons of the group's failures (the case ids stripped).
  grep '^FAILREASON' "$log" | sed 's/^FAILREASON [^ ]*: //' | cut -c1-160 | sort | uniq -c | sort -rn | head -5 |
    sed 's/^/    /' | tee -a "$RESULTS/summary.txt"
done
cd "$ROOT"

timeout "${FLASHBOX_PY_TIMEOUT:-300}" "$PY" -m pytest -q -rs -p no:cacheprovider tests/python/test_flash_attn_interface.py \
  > "$RESULTS/flashbox_python.log" 2>&1
prc=$?
echo "flashbox python: $(tail -1 "$RESULTS/flashbox_python.log") (rc $prc)" | tee -a "$RESULTS/summary.txt"
