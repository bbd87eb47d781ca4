#!/usr/bin/env bash
# One device call for GPT-2 on CUDA: the CUDA forward test (naive vs flash, GPU vs CPU), then the bar:
# the 124M config with seeded weights, 65,536 tokens in windows of 1,024, naive and flash, at batch 16
# (JSON) and 32 (table). Logs go to $OUT. Runs what build-gpt2-dev holds (carried), made here with:
#   cmake -S . -B build-gpt2-cuda -G Ninja -DFLASHBOX_CUDA=ON -DFLASHBOX_CUDA_ARCHS=90a \
#         -DCMAKE_DISABLE_FIND_PACKAGE_BLAS=ON        # the device image has no OpenBLAS
#   ninja -C build-gpt2-cuda flashbox_cli test_gpt2
#   mkdir -p build-gpt2-dev/lib; cp build-gpt2-cuda/flashbox build-gpt2-cuda/tests/test_gpt2 build-gpt2-dev/
#   cp -L /lib/x86_64-linux-gnu/libgomp.so.1 build-gpt2-dev/lib/
#   (the repository's sources and docs, concatenated) | flashbox gpt2 tokenize -> build-gpt2-dev/corpus_tokens.bin
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
