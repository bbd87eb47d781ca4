#!/usr/bin/env bash
# Issue 17's device runs: `flashbox gpt2 train` against PyTorch on the H200. Runs prebuilt binaries
# from devbin/ (built on a CPU machine: cmake -DFLASHBOX_CUDA=ON -DFLASHBOX_CUDA_ARCHS=90a
# -DCMAKE_DISABLE_FIND_PACKAGE_BLAS=ON; ninja flashbox_cli test_gpt2; plus libgomp) and the corpus
# shards devbin/corpus_{train,val}.bin.xz (scripts/build_corpus.py). Logs and JSON go to $OUT.
#   bash bench/gpt2_train_device.sh tests grads curve bench     # checks and throughput (call 1)
#   bash bench/gpt2_train_device.sh trainer_tests grads_bf16 curve_fb bench train   # call 2
#   BENCH_DATA=val bash bench/gpt2_train_device.sh trainer_tests profile report_check  # call 3 (phases)
#   bash bench/gpt2_train_device.sh trainer_tests bench profile_fast train             # call 4 (closing)
#   TRAIN_STEPS=200 TORCH_STEPS=150 TRAIN_LR=3e-4 SKIP_CPU_REPORT=1 bash bench/gpt2_train_device.sh train  # call 5
# Issue 17's whole bar in one command (~3.5 min: tests, throughput vs PyTorch, train + PyTorch + eval + report):
#   TRAIN_STEPS=200 TRAIN_LR=3e-4 bash bench/gpt2_train_device.sh trainer_tests bench train
# Binaries may come xz-compressed (devbin/flashbox.xz, devbin/test_gpt2.xz). When a CUDA trainer test
# fails, the steps after it run without the one-pass LayerNorm backward and the direct dqkv.
set -u
B=devbin
for f in $B/*.xz; do case $f in *corpus*) ;; *) [ -f "$f" ] && xz -dc "$f" > "${f%.xz}" && chmod +x "${f%.xz}";; esac; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
O=${OUT:-/tmp/gpt2_train_out}
W=/tmp/gpt2_work
mkdir -p "$O" "$W"
FB=$B/flashbox
PY="python3 bench/gpt2_train_torch.py"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee -a "$W/gpu.txt"
[ -f $B/corpus_train.bin.xz ] && xz -T0 -dc $B/corpus_train.bin.xz > $W/train.bin
[ -f $B/corpus_val.bin.xz ] && xz -T0 -dc $B/corpus_val.bin.xz > $W/val.bin
ls -la $W

# Training settings shared by flashbox and PyTorch (124M, T = 1024).
CURVE="--batch 8 --seqlen 1024 --steps 50 --lr 6e-4 --warmup 10 --min-lr-fraction 0.1 --weight-decay 0.1 --grad-clip 1.0"

for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    tests)
      timeout 180 $B/test_gpt2 --gtest_filter='CudaTrainer.*:CudaForward.*' 2>&1 | tee $O/test_gpt2_cuda.log | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) |Failure|Expected|Which is|sharpened|rel_err|error" | head -40
      ;;
    trainer_tests)
      timeout 120 $B/test_gpt2 --gtest_filter='CudaTrainer.*' > $W/test_trainer.log 2>&1
      rc=$?; grep -E "^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which is|rel_err" $W/test_trainer.log | head -20
      if [ $rc -ne 0 ]; then
        echo "a CUDA trainer test failed: the rest runs without the one-pass LayerNorm backward and direct dqkv"
        export FLASHBOX_TRAIN_LN_FUSED=0 FLASHBOX_TRAIN_QKV_DIRECT=0
      fi
      ;;
    grads_bf16)
      timeout 60 $FB gpt2 train --device cuda --config gpt2 --seed 1 --train $W/train.bin --batch 4 --seqlen 1024 \
        --steps 1 --save-init $W/gpt2_init.bin --dump-grads $W/gpt2_cuda_grads.bin --quiet
      timeout 60 $PY grads --weights $W/gpt2_init.bin --tokens $W/train.bin --batch 4 --seqlen 1024 \
        --grads $W/gpt2_cuda_grads.bin --bound 2e-2 --label "bf16 (cuda trainer, 124M)" --json $W/grads_bf16.json | tail -18
      ;;
    curve_fb)
      # flashbox's side only: PyTorch's curves of this run are in call 1's curves.json (same seed, batches)
      timeout 60 $FB gpt2 train --device cuda --config gpt2 --seed 1 --train $W/train.bin $CURVE \
        --log $W/curve_flashbox.jsonl > $W/curve_flashbox.txt 2>&1; tail -1 $W/curve_flashbox.txt
      ;;
    grads)
      # fp32: the CPU trainer (small config); bf16: the CUDA trainer (124M). Same first batch.
      timeout 120 $FB gpt2 train --device cpu --config small --seed 1 --train $W/train.bin --batch 2 --seqlen 128 \
        --steps 1 --save-init $W/small_init.bin --dump-grads $W/small_cpu_grads.bin --quiet
      timeout 60 $PY grads --weights $W/small_init.bin --tokens $W/train.bin --batch 2 --seqlen 128 \
        --grads $W/small_cpu_grads.bin --bound 1e-3 --label "fp32 (cpu trainer, small)" --json $O/grads_fp32.json | tail -20
      timeout 60 $FB gpt2 train --device cuda --config gpt2 --seed 1 --train $W/train.bin --batch 4 --seqlen 1024 \
        --steps 1 --save-init $W/gpt2_init.bin --dump-grads $W/gpt2_cuda_grads.bin --quiet
      timeout 60 $PY grads --weights $W/gpt2_init.bin --tokens $W/train.bin --batch 4 --seqlen 1024 \
        --grads $W/gpt2_cuda_grads.bin --bound 2e-2 --label "bf16 (cuda trainer, 124M)" --json $O/grads_bf16.json | tail -20
      ;;
    curve)
      timeout 60 $FB gpt2 train --device cuda --config gpt2 --seed 1 --train $W/train.bin $CURVE \
        --save-init $W/gpt2_init.bin --log $O/curve_flashbox.jsonl > $O/curve_flashbox.txt 2>&1; tail -3 $O/curve_flashbox.txt
      timeout 90 $PY train --weights $W/gpt2_init.bin --train $W/train.bin $CURVE --json $W/curve_torch_bf16.json | tail -2
      timeout 120 $PY train --weights $W/gpt2_init.bin --train $W/train.bin $CURVE --fp32 --json $W/curve_torch_fp32.json | tail -2
      $PY curves --flashbox-log $O/curve_flashbox.jsonl --torch-bf16 $W/curve_torch_bf16.json \
        --torch-fp32 $W/curve_torch_fp32.json --json $O/curves.json
      ;;
    profile)
      # Where flashbox's step goes (FLASHBOX_TRAIN_PROFILE: CUDA events between phases), one variant
      # at a time, B 16 x T 1024; then PyTorch's kernels of the same step (torch.profiler).
      pv() {  # name, then VAR=value settings and extra flags
        local name=$1; shift
        timeout 60 env FLASHBOX_TRAIN_PROFILE=1 "$@" --config gpt2 --train $W/${BENCH_DATA:-train}.bin --batch 16 \
          --seqlen 1024 --steps 12 --quiet > $W/prof_$name.txt 2>&1
        echo "--- $name: $(grep trained $W/prof_$name.txt)"; grep -v trained $W/prof_$name.txt | head -32
      }
      pv base env FLASHBOX_TRAIN_LN_FUSED=0 $FB gpt2 train --device cuda
      pv ln_fused $FB gpt2 train --device cuda
      pv fast_attn_bwd $FB gpt2 train --device cuda --deterministic 0
      pv fast_tuned env FLASHBOX_TRAIN_GEMM_TUNE=1 FLASHBOX_TRAIN_HEAD_ROWS=16384 $FB gpt2 train --device cuda --deterministic 0
      [ "${PROFILE_TORCH:-1}" = 1 ] || continue
      timeout 240 $PY bench --batch 16 --seqlen 1024 --steps 20 --profile 3 --profile-json $W/torch_profile.json \
        --json $W/bench_torch.json 2>&1 | tee $O/torch_profile.txt | grep -v Warning | head -60
      ;;
    profile_fast)
      # The phases of the two settings the bench measures (FLASHBOX_TRAIN_PROFILE; B 16 x T 1024).
      for det in 0 1; do
        timeout 60 env FLASHBOX_TRAIN_PROFILE=1 $FB gpt2 train --device cuda --deterministic $det --config gpt2 \
          --train $W/${BENCH_DATA:-train}.bin --batch 16 --seqlen 1024 --steps 12 --quiet > $W/prof_det$det.txt 2>&1
        echo "--- deterministic $det"; head -12 $W/prof_det$det.txt; grep -E "GPU span|trained" $W/prof_det$det.txt
      done
      ;;
    report_check)
      # `flashbox report --weights`: a short 124M run's checkpoint, its model_N.json, the gpt2 step.
      timeout 60 $FB gpt2 train --device cuda --config gpt2 --seed 3 --train $W/${BENCH_DATA:-train}.bin --val $W/val.bin \
        --batch 16 --seqlen 1024 --steps 20 --val-tokens 65536 --out $W/short --data-label "check run" --quiet
      timeout 120 $FB report --steps gpt2 --weights $W/short/model_000020.bin --tokens $W/val.bin \
        --json $O/report_short.json --html $W/report_short.html 2>&1 | tail -3
      python3 -c "import json,sys; g=json.load(open(sys.argv[1]))['steps']['gpt2']; print(g['trained']); [print(r) for r in g['rows']]" $O/report_short.json
      ;;
    bench)
      # The same batch shape for both: B = 16 windows of 1,024, one optimizer step per batch.
      timeout 240 $PY bench --batch 16 --seqlen 1024 --steps 20 --json $W/bench_torch.json 2>&1 | tail -3
      # flashbox: --deterministic 0 (the Hopper attention backward, tuned products: PyTorch's SDPA
      # backward is not bit-reproducible either), then --deterministic 1 for the record.
      timeout 90 $FB gpt2 train --device cuda --config gpt2 --train $W/${BENCH_DATA:-train}.bin --batch 16 --seqlen 1024 \
        --steps 25 --deterministic 0 --log $W/bench_flashbox.jsonl > $W/bench_flashbox.txt 2>&1
      echo "flashbox --deterministic 0: $(tail -1 $W/bench_flashbox.txt)"
      timeout 90 $FB gpt2 train --device cuda --config gpt2 --train $W/${BENCH_DATA:-train}.bin --batch 16 --seqlen 1024 \
        --steps 25 --deterministic 1 --log $W/bench_flashbox_det.jsonl > $W/bench_flashbox_det.txt 2>&1
      echo "flashbox --deterministic 1: $(tail -1 $W/bench_flashbox_det.txt)"
      python3 -c "
import json, sys
t = json.load(open(sys.argv[1]))['tokens_per_second']
for path, name in ((sys.argv[2], 'deterministic 0'), (sys.argv[3], 'deterministic 1')):
    f = [json.loads(l) for l in open(path) if 'summary' in l][0]['tokens_per_second']
    print(f'ratio flashbox ({name}) / torch.compile: {f:.0f} / {t:.0f} = {f / t:.3f}x (bar 1.1x)')
" $W/bench_torch.json $W/bench_flashbox.jsonl $W/bench_flashbox_det.jsonl | tee $W/bench_ratio.txt
      if [ -n "${BENCH_MORE:-}" ]; then
        FLASHBOX_TRAIN_FUSED=0 timeout 90 $FB gpt2 train --device cuda --config gpt2 --train $W/train.bin --batch 16 \
          --seqlen 1024 --steps 10 > $W/bench_flashbox_plain.txt 2>&1; echo "plain path: $(tail -1 $W/bench_flashbox_plain.txt)"
        timeout 90 $FB gpt2 train --device cuda --attention naive --config gpt2 --train $W/train.bin --batch 16 --seqlen 1024 \
          --steps 10 > $W/bench_flashbox_naive.txt 2>&1; echo "naive attention: $(tail -1 $W/bench_flashbox_naive.txt)"
      fi
      ;;
    train)
      # ~100 s of 124M from scratch on the corpus (600 steps of 65,536 tokens), then the swap on the
      # held-out shard, then PyTorch on the same batches (torch.compile, stopped at step 150).
      S=${TRAIN_STEPS:-600}
      echo "FLASHBOX_TRAIN_FUSED=${FLASHBOX_TRAIN_FUSED:-1}"
      RUN="--batch 16 --seqlen 1024 --total-batch 65536 --lr ${TRAIN_LR:-6e-4} --warmup 40 --min-lr-fraction 0.1 --weight-decay 0.1 --grad-clip 1.0"
      LABEL="the project's English corpus (scripts/build_corpus.py: prose from Debian and npm packages, 32.4M training tokens, documents shuffled)"
      timeout 300 $FB gpt2 train --device cuda --config gpt2 --seed 7 --train $W/train.bin --val $W/val.bin $RUN \
        --steps $S --val-every 50 --val-tokens 262144 --out $W/run --save-init $W/train_init.bin --deterministic 0 \
        --data-label "$LABEL" --log $O/train_flashbox.jsonl > $W/train_flashbox.txt 2>&1
      grep -E "val|trained" $W/train_flashbox.txt | tail -14
      timeout 120 $FB gpt2 eval --device cuda --weights $W/run/model_$(printf %06d $S).bin --tokens $W/val.bin \
        --count 131072 --seqlen 1024 --impl naive,flash --json > $O/eval_cuda.json 2> $W/eval_cuda.err; cat $O/eval_cuda.json
      [ -n "${SKIP_CPU_REPORT:-}" ] || timeout 120 $FB gpt2 eval --device cpu --weights $W/run/model_$(printf %06d $S).safetensors --tokens $W/val.bin \
        --count 1024 --seqlen 1024 --impl naive,blocked --json > $O/eval_cpu.json 2> $W/eval_cpu.err; cat $O/eval_cpu.json
      [ -n "${SKIP_CPU_REPORT:-}" ] || timeout 120 $FB report --steps gpt2 --weights $W/run/model_$(printf %06d $S).bin --tokens $W/val.bin \
        --json $O/report_gpt2.json --html $O/report_gpt2.html 2>&1 | tail -2
      cp $W/run/model_$(printf %06d $S).json $W/ 2>/dev/null
      PS=${TORCH_STEPS:-150}
      timeout 200 $PY train --weights $W/train_init.bin --train $W/train.bin --val $W/val.bin --val-tokens 262144 \
        $RUN --steps $S --stop $PS --compile --flashbox-log $O/train_flashbox.jsonl --json $O/train_torch.json 2>&1 | tail -4
      ;;
  esac
done
echo "=== done $(date +%T)"
# At most 8 files come back: pack the small ones of $W that the record needs.
tar -czf $O/work_logs.tgz -C $W $(cd $W && ls *.json *.jsonl *.txt *.log 2>/dev/null) 2>/dev/null
