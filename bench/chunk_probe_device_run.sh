#!/usr/bin/env bash
# The CTA chunk at long causal T (flash_bwd_sm90.cu chunk_heads_for): one library timed under
# FLASHBOX_SM90_BWD_CHUNK_HEADS=1 / 2 / 3 in one process (sm90_bwd_variants.py, cuDNN beside them),
# B4 bf16, causal and full, T 12288 and 16384, MHA and GQA 32/8; then the deterministic mode beside the
# non-deterministic one under chunks of 1 and 2 at T 16384.
#   bench/chunk_probe_device_run.sh TARBALL [ROUNDS (7)]
set -u
. "$(dirname "$0")/device_steps.sh" "$1" probe all
begin_call 280
L=$B/libflashbox.so R=${2:-7}
tstep chunks 170 python3 bench/sm90_bwd_variants.py c1=$L c2=$L c3=$L --env c1:FLASHBOX_SM90_BWD_CHUNK_HEADS=1 \
  --env c2:FLASHBOX_SM90_BWD_CHUNK_HEADS=2 --env c3:FLASHBOX_SM90_BWD_CHUNK_HEADS=3 --rounds $R \
  --shapes 128:16:16384:1,64:12:16384:1,128:16:12288:1,64:12:12288:1,128:32:16384:1:8,128:16:16384:0,64:12:16384:0 \
  --json "$O/chunks.json"
tstep chunks_det 90 python3 bench/sm90_bwd_variants.py c1=$L c2=$L --env c1:FLASHBOX_SM90_BWD_CHUNK_HEADS=1 \
  --env c2:FLASHBOX_SM90_BWD_CHUNK_HEADS=2 --det c1,c2 --rounds 3 --no-cudnn --shapes 128:16:16384:1,64:12:16384:1 \
  --json "$O/chunks_det.json"
grep -E "^D(64|128) " "$log"
