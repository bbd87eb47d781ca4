#!/usr/bin/env bash
# One device call for GPT-2 on CUDA: the CUDA forward test (naive vs flash, GPU vs CPU), then the bar:
# the 124M config with seeded weights, 65,536 tokens in windows of 1,024, naive and flash, at batch 16
# (JSON) and 32 (table). Runs prebuilt binaries and a token shard from build-gpt2-dev (carried; made
# by `make`-free steps in the report of issue 4). Logs go to $OUT.
set -u
B=build-gpt2-dev
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$B/lib:${LD_LIBRARY_PATH:-}
O=${OUT:-/tmp/gpt2_out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$O/gpu.txt"
timeout 90 $B/test_gpt2 --gtest_filter='CudaForward.*' > "$O/test_gpt2_cuda.log" 2>&1
echo "cuda test rc=$?"; grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) |Failure|Expected|Which is|actual|error" "$O/test_gpt2_cuda.log" | head -30
args="--init gpt2 --seed 1234 --tokens $B/corpus_tokens.bin --count 65536 --seqlen 1024 --device cuda --impl naive,flash"
timeout 120 $B/flashbox gpt2 eval $args --batch 16 --json > "$O/gpt2_eval_b16.json" 2> "$O/gpt2_eval_b16.err"
echo "eval b16 rc=$?"; cat "$O/gpt2_eval_b16.json"; tail -3 "$O/gpt2_eval_b16.err"
timeout 120 $B/flashbox gpt2 eval $args --batch 32 > "$O/gpt2_eval_b32.txt" 2>&1
echo "eval b32 rc=$?"; cat "$O/gpt2_eval_b32.txt"
