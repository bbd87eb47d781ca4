#!/usr/bin/env bash
# The several-GPU run of issue 18 on nvidia-h200-x2 / -x4 (not lent on 2026-12-01, so not run yet):
# bench/ring_bench.py under torchrun for each world size in the list (correctness against one GPU,
# then forward and forward+backward time, scaling efficiency and overlap at 8k/32k/128k tokens per
# GPU). Prebuilt binaries as for bench/ring_sim_device_run.sh:
#   tar -czf .dev/ring.tar.gz -C build-cuda tests/context_parallel/test_context_parallel libflashbox.so libflashbox_cp.so
#   bench/ring_multi_gpu_run.sh .dev/ring.tar.gz 1,2,4 [extra ring_bench.py options]
# Writes $OUT/ring_xN.json and $OUT/ring_xN.log. NVLink multicast stays off.
set -u
O=${OUT:-/tmp/ring_out}; mkdir -p "$O"
B=/tmp/fbcp; mkdir -p $B && tar -xzf "$1" -C $B
WORLDS=${2:-1,2,4}; shift 2 || shift $#
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B:${LD_LIBRARY_PATH:-}
if [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$nccl_dir:$LD_LIBRARY_PATH
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export FLASHBOX_LIBRARY=$B/libflashbox.so FLASHBOX_CP_LIBRARY=$B/libflashbox_cp.so PYTHONPATH=python
nvidia-smi topo -m > "$O/topo.txt" 2>&1
for n in ${WORLDS//,/ }; do
  s=$(date +%s)
  timeout 540 torchrun --standalone --nproc_per_node=$n bench/ring_bench.py --warmup 1 --repeats 3 \
    --json "$O/ring_x$n.json" "$@" > "$O/ring_x$n.log" 2>&1
  echo "world $n: rc=$? ($(( $(date +%s) - s )) s)"
  grep -E "^(check|causal|full|ring_bench)" "$O/ring_x$n.log"
done
