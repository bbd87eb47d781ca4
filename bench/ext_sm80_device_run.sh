#!/usr/bin/env bash
# The sm80 extension's checks on a GPU in one call (issue 14: windows, softcap, ALiBi, varlen, head
# dims multiple of 8 up to 128): the GPU suites (tests/cuda incl. ExtSm80, tests/backward),
# compute-sanitizer memcheck of ExtSm80.SmallCases, FlashAttention-2's own tests (a slice with every
# feature: both softcaps, causal, local, ALiBi, deterministic, kvpacked; GQA, bf16) and flashbox's
# flash_attn compatibility tests, and bench/ext_sm80_cost.py (what each field costs). Binaries are built on the CPU machine and carried as a tarball:
#   bash bench/ext_sm80_device_run.sh <tarball> <FlashAttention-2 tests/test_flash_attn.py>
# The tarball holds test_cuda, test_backward, libflashbox.so and lib/ (libgomp, libopenblas and its
# Fortran runtime). Every step has its own time limit; most important first. Logs go to $OUT.
set -u
O=${OUT:-/tmp/ext_out}; mkdir -p "$O"
B=/tmp/fb_ext; mkdir -p $B && tar -xzf "$1" -C $B
FA2=$2
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/libflashbox.so PYTHONPATH=$PWD/bench/fa2_compat:$PWD/python:$PWD/tests/python
log="$O/run.log"
step() {
  local name=$1 s=$(date +%s); shift
  echo "== $name" | tee -a "$log"; "$@" > "$O/$name.log" 2>&1; local rc=$?
  tail -4 "$O/$name.log" >> "$log"; echo "rc=$rc ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
SLICE="(0.0-113-203-59- or 0.0-113-203-96-) and gqa and dtype1"
VSLICE="(0.0-113-203-59- or 0.0-1-147-128-) and gqa and dtype1"
step test_cuda timeout 30 $B/test_cuda --gtest_brief=1
step fa2_output timeout 30 python3 -m pytest -q -p no:cacheprovider "$FA2::test_flash_attn_output" -k "$SLICE"
step fa2_varlen_output timeout 30 python3 -m pytest -q -p no:cacheprovider "$FA2::test_flash_attn_varlen_output" -k "$VSLICE"
step memcheck timeout 45 env FLASHBOX_FLASH_ARCH=sm80 FLASHBOX_BWD_ARCH=sm80 compute-sanitizer --tool memcheck \
  --error-exitcode 9 $B/test_cuda --gtest_brief=1 --gtest_filter='ExtSm80.SmallCases'
step cost timeout 40 python3 bench/ext_sm80_cost.py --reps 5 --json "$O/ext_sm80_cost.json"
step test_backward timeout 60 $B/test_backward --gtest_brief=1
step flashbox_compat timeout 50 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_flash_attn_compat.py
grep -E "^(==|rc=)" "$log"
