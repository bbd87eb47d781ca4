#!/usr/bin/env bash
# FlashAttention-2's whole test matrix (tests/python/fa2_compat/fa2_direct.py --seconds 0, dropout 0) in N shards run
# side by side on one GPU: each case is mostly Python and small launches, so one process leaves the
# GPU idle most of the time. Every shard writes its JSON as it goes (a shard cut off by the time
# limit still reports what it ran); tests/python/fa2_compat/fa2_matrix_merge.py adds them up and says whether every
# case of every function ran.
#   bash tests/python/fa2_compat/fa2_matrix.sh TEST_FILE OUT_DIR [SHARDS] [SECONDS_LIMIT]
# Environment as for fa2_direct.py (PYTHONPATH with tests/python/fa2_compat and python, FLASHBOX_LIBRARY);
# FA2_FUNCTIONS the functions, FA2_HEAD_DIMS (e.g. 80,96) only those head dims' slice of each.
set -u
file=$1 out=$2 n=${3:-12} limit=${4:-400}
mkdir -p "$out"
start=$(date +%s)
export OMP_NUM_THREADS=1  # the references run on the GPU; 16 cores shared by the shards
for i in $(seq 0 $((n - 1))); do
  timeout "$limit" python3 tests/python/fa2_compat/fa2_direct.py "$file" --seconds 0 --shard "$i/$n" \
    ${FA2_FUNCTIONS:+--functions "$FA2_FUNCTIONS"} ${FA2_HEAD_DIMS:+--head-dims "$FA2_HEAD_DIMS"} --json "$out/shard_$i.json" > "$out/shard_$i.log" 2>&1 &
done
wait
echo "$n shards in $(( $(date +%s) - start )) s"
# The shards share the GPU's memory: a case that ran out of it is retried alone, one process, after
# them (FA2_RETRY_S, default 240 s), and its outcome replaces the shard's.
python3 tests/python/fa2_compat/fa2_matrix_merge.py "$out"/shard_*.json --shards "$n" --oom-list "$out/oom.json" > /dev/null
retry=()
if [ -s "$out/oom.json" ] && [ "$(cat "$out/oom.json")" != "{}" ]; then
  timeout "${FA2_RETRY_S:-240}" python3 tests/python/fa2_compat/fa2_direct.py "$file" --seconds 0 --only "$out/oom.json" ${FA2_HEAD_DIMS:+--head-dims "$FA2_HEAD_DIMS"} \
    --json "$out/retry.json" > "$out/retry.log" 2>&1
  echo "retried the out-of-memory cases alone: rc=$? ($(( $(date +%s) - start )) s since the start)"
  retry=(--retry "$out/retry.json")
fi
python3 tests/python/fa2_compat/fa2_matrix_merge.py "$out"/shard_*.json --shards "$n" "${retry[@]}" --json "$out/matrix.json"
rc=$?
# One archive instead of 2N files (the device returns a limited number of files).
tar -czf "$out/shards.tar.gz" -C "$out" $(cd "$out" && ls shard_*) && rm -f "$out"/shard_*
exit $rc
