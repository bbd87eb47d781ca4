#!/usr/bin/env bash
# The one-GPU device run of issue 18 (context parallelism), in one call on nvidia-h200: the simulated
# ring on the GPU (N = 2, 3, 4, 8, every mask, ring and all-gather, forward and backward), the merge
# and copy kernels, a one-rank NCCL communicator, compute-sanitizer memcheck on a small case, and the
# Python entry's tests. Prebuilt binaries come as a tarball built on the CPU machine:
#   tar -czf .dev/ring.tar.gz -C build-cuda tests/context_parallel/test_context_parallel libflashbox.so libflashbox_cp.so
#   bench/ring_sim_device_run.sh .dev/ring.tar.gz [STEP,STEP,...]   (default: every step)
# Steps: gpu_tests memcheck pytest cpu_tests sim_bench (the ring's own cost on one GPU, ring_bench.py
# --simulate), sim_bench_keep (the same with FLASHBOX_CP_KEEP_MEMORY=1).
# Logs go to $OUT (ring_sim.log, one file per step). Every step has its own time limit.
set -u
O=${OUT:-/tmp/ring_out}; mkdir -p "$O"
B=/tmp/fbcp; mkdir -p $B && tar -xzf "$1" -C $B
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B:${LD_LIBRARY_PATH:-} PATH=/usr/local/cuda/bin:$PATH
# libnccl.so.2: the toolkit's where it has one, else the one PyTorch's wheels bring.
if [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$nccl_dir:$LD_LIBRARY_PATH
  echo "libnccl.so.2 from ${nccl_dir:-nowhere}" | tee -a "$O/ring_sim.log"
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export FLASHBOX_LIBRARY=$B/libflashbox.so FLASHBOX_CP_LIBRARY=$B/libflashbox_cp.so PYTHONPATH=python
T=$B/tests/context_parallel/test_context_parallel
log="$O/ring_sim.log"
ONLY=",${2:-all},"
step() {
  case "$ONLY" in *,all,*|*",$1,"*) ;; *) return 0 ;; esac
  local s=$(date +%s) name=$1; shift
  echo "== $name: $*" | tee -a "$log"
  "$@" > "$O/$name.log" 2>&1; local rc=$?
  cat "$O/$name.log" >> "$log"
  echo "rc=$rc ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"
step gpu_tests timeout 150 $T --gtest_filter='GpuKernels.*:Variants/GpuRing.*:Variants/NcclOneRank.*'
# --report-api-errors no: libnccl's ncclCommInitRank probes kernels with cudaFuncGetAttributes and gets
# cudaErrorNoKernelImageForDevice, which memcheck otherwise counts as errors (2026-12-01, first run).
step memcheck timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $T \
  --gtest_filter='Variants/GpuRing.Small/*:GpuKernels.*:Variants/NcclOneRank.*' --gtest_brief=1
step pytest timeout 60 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_ring.py
step cpu_tests timeout 60 $T --gtest_filter='-GpuKernels.*:Variants/GpuRing.*:Variants/NcclOneRank.*' --gtest_brief=1
step sim_bench timeout 120 python3 bench/ring_bench.py --simulate 2,4 --tokens-per-gpu 8192,32768 \
  --configs causal_zigzag_ring,full_ring --warmup 1 --repeats 3 --json "$O/ring_sim_bench.json"
# The same with scratch from a pool that keeps its memory between calls (FLASHBOX_CP_KEEP_MEMORY=1).
step sim_bench_keep env FLASHBOX_CP_KEEP_MEMORY=1 timeout 120 python3 bench/ring_bench.py --simulate 2,4 \
  --tokens-per-gpu 8192,32768 --configs causal_zigzag_ring,full_ring --warmup 1 --repeats 3 \
  --json "$O/ring_sim_bench_keep.json"
grep -E "^(==|rc=)" "$log"
