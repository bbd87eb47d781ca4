#!/usr/bin/env bash
# Second device call of the sm80 extension's checks (after bench/ext_sm80_device_run.sh, whose pytest
# runs of FlashAttention-2's tests were still collecting when their limits hit): the rebuilt library's
# sm80 GPU tests, FlashAttention-2's test functions called directly on a sample of their matrix
# (bench/fa2_direct.py), bench/ext_sm80_cost.py. (flashbox's own flash_attn CUDA tests did not fit this call.)
#   bash bench/fa2_second_call.sh <tarball> <FlashAttention-2 tests/test_flash_attn.py>
set -u
O=${OUT:-/tmp/ext_out}; mkdir -p "$O"
B=/tmp/fb_ext; mkdir -p $B && tar -xzf "$1" -C $B
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/libflashbox.so PYTHONPATH=$PWD/bench/fa2_compat:$PWD/python:$PWD/tests/python
step() {
  local name=$1 s=$(date +%s); shift
  "$@" > "$O/$name.log" 2>&1; echo "$name rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$O/run.log"
}
step test_cuda_sm80 timeout 20 $B/test_cuda --gtest_brief=1 --gtest_filter='ExtSm80.*:*flash_sm80*'
step fa2_direct timeout 36 python3 bench/fa2_direct.py "$2" --seconds 2.5 --json "$O/fa2_direct.json"
step cost timeout 16 python3 bench/ext_sm80_cost.py --reps 5 --json "$O/ext_sm80_cost.json"

tail -3 "$O/test_cuda_sm80.log"; grep -E "passed|rc=" "$O/fa2_direct.log" | head -12; cat "$O/cost.log"
