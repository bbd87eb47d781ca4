#!/usr/bin/env bash
# The Hopper forward's sliding-window cost (branch sm90-fwd-window, bench/NOTES.md sm90 forward v11) in
# one call on the H200: the window tests of the new build against the fp64 reference, then
# bench/sm90_window_ab.py with main's library ("base", 1b16c25) and the new one interleaved in one
# process on the window rows (D64 H12 and D128 H16, T 16384, W 1024 causal and two-sided, the plain
# kernel at 16384 and at the same work), the new build also with the head_dim 64 128 x 128 tile
# (FLASHBOX_SM90_TILE), then test_sm90. Prebuilt binaries come as a tarball (built on the CPU machine,
# `carry`ed): new/libflashbox.so, base/libflashbox.so, test_sm90, test_sm90_mods, lib/ with libgomp,
# libopenblas, libgfortran, libquadmath.
#   bench/sm90_fwd_window_device_run.sh fwdwin.tar.gz [STEP,STEP,...]   (default: every step)
# Most important first, each step under its own time limit (about 140 s in all), logs under $OUT.
# Packing (CPU machine, build-cuda built for 90a; base = the library of 1b16c25 saved before the change):
#   rm -rf /work/main/.carry/fwdwin && mkdir -p /work/main/.carry/fwdwin/src && git -C /work/wt/ring archive sm90-fwd-window | tar -x -C /work/main/.carry/fwdwin/src
#   P=/tmp/fwdwinpack; rm -rf $P; mkdir -p $P/lib $P/new $P/base && cp build-cuda/libflashbox.so $P/new/ && \
#     cp /tmp/fwdwin_base.so $P/base/libflashbox.so && cp build-cuda/tests/sm90/test_sm90 build-cuda/tests/sm90/test_sm90_mods $P/ && \
#     for l in libgomp.so.1 libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do cp -L /lib/x86_64-linux-gnu/$l $P/lib/; done && \
#     tar -czf /work/main/.carry/fwdwin/fwdwin.tar.gz -C $P .
# Device call: run(command="cd .carry/fwdwin/src && bash bench/sm90_fwd_window_device_run.sh ../fwdwin.tar.gz",
#   carry=[".carry/fwdwin"], timeout_s=150)
set -u
O=${OUT:-/tmp/fwdwin_out}; mkdir -p "$O"
B=/tmp/fb_fwdwin; mkdir -p $B && tar -xzf "$1" -C $B
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/new/libflashbox.so PYTHONPATH=python
log="$O/run.log"
ONLY=",${2:-all},"
step() {
  case "$ONLY" in *,all,*|*",$1,"*) ;; *) return 0 ;; esac
  local s=$(date +%s); echo "== $1" | tee -a "$log"; shift; "$@" >>"$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"

# Correctness first: the group walk's own test, then the other window tests.
step mods_groups timeout 30 $B/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.GroupsSkipBlocksTheyDoNotSee'
step mods timeout 45 $B/test_sm90_mods --gtest_brief=1 --gtest_filter='-Sm90Mods.GroupsSkipBlocksTheyDoNotSee'
# The speed: main's library and the new one, interleaved, 3 rounds; the new one with D64 on 128 x 128.
step ab timeout 60 python3 bench/sm90_window_ab.py base=$B/base/libflashbox.so new=$B/new/libflashbox.so \
  new_t128=$B/new/libflashbox.so:FLASHBOX_SM90_TILE=128x128 --configs 64:12,128:16 --seqlens 16384 \
  --windows 1024 --rounds 3 --json "$O/window_ab.json"
step test_sm90 timeout 40 $B/test_sm90 --gtest_brief=1
grep -E "^(==|rc=)" "$log" | tail -30
