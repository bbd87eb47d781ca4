#!/usr/bin/env bash
# The Hopper forward's sliding-window cost (branch sm90-fwd-window, bench/NOTES.md sm90 forward v11) in
# one call on the H200: the new build's window tests and test_sm90 against the fp64 reference, then
# bench/sm90_window_ab.py with main's library ("base", 1b16c25), change 1 alone ("c1", eaae679: each
# warpgroup walks only its own blocks) and changes 1 + 2 ("c2": half blocks at a group's edges)
# interleaved in one process on the window rows (D64 H12 and D128 H16, T 16384, W 1024 causal and
# two-sided, the plain kernel at 16384 and at the same work). Prebuilt binaries come as a tarball
# (built on the CPU machine, `carry`ed): c2/ and c1/ (libflashbox.so, test_sm90_mods), base/libflashbox.so,
# test_sm90 (c2), lib/ with libgomp, libopenblas, libgfortran, libquadmath.
#   bench/sm90_fwd_window_device_run.sh fwdwin.tar.gz [STEP,STEP,...]   (default: every step)
# Most important first, each step under its own time limit (about 90 s expected, 145 s at most), logs under $OUT.
# Packing (CPU machine; base = build-cuda's library of 1b16c25 saved before the change, c1 = the
# build of eaae679 saved before change 2, c2 = build-cuda now):
#   rm -rf /work/main/.carry/fwdwin && mkdir -p /work/main/.carry/fwdwin/src && git -C /work/wt/ring archive sm90-fwd-window | tar -x -C /work/main/.carry/fwdwin/src
#   P=/tmp/fwdwinpack; rm -rf $P; mkdir -p $P/lib $P/c1 $P/c2 $P/base && cp /tmp/fwdwin_base.so $P/base/libflashbox.so && \
#     cp /tmp/fwdwin_new1.so $P/c1/libflashbox.so && cp /tmp/fwdwin_new1_test_sm90_mods $P/c1/test_sm90_mods && \
#     cp build-cuda/libflashbox.so build-cuda/tests/sm90/test_sm90_mods $P/c2/ && cp build-cuda/tests/sm90/test_sm90 $P/ && \
#     for l in libgomp.so.1 libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do cp -L /lib/x86_64-linux-gnu/$l $P/lib/; done && \
#     tar -czf /work/main/.carry/fwdwin/fwdwin.tar.gz -C $P .
# Device call: run(command="cd .carry/fwdwin/src && bash bench/sm90_fwd_window_device_run.sh ../fwdwin.tar.gz",
#   carry=[".carry/fwdwin"], timeout_s=140)
set -u
. "$(dirname "$0")/device_steps.sh" "$1" fwdwin "${2:-all}"
export FLASHBOX_LIBRARY=$B/c2/libflashbox.so  # the build under test (c2)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"

# Correctness first: the group walk's own test, the other window tests (not head_dim 256, whose
# kernel neither change touches), test_sm90 (not its head-dim tests: 192 and 256 kernels).
step mods_groups timeout 25 $B/c2/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.GroupsSkipBlocksTheyDoNotSee'
step mods timeout 40 $B/c2/test_sm90_mods --gtest_brief=1 --gtest_filter='-Sm90Mods.GroupsSkipBlocksTheyDoNotSee:Sm90Mods.HeadDim256'
step test_sm90 timeout 25 $B/test_sm90 --gtest_brief=1 --gtest_filter='-Sm90.HeadDim*'
# The speed: main's library, change 1, changes 1 + 2, interleaved, 3 rounds (c1's outputs are checked
# against base's there; bench/sm90_window_ab.py also takes NAME=PATH:FLASHBOX_SM90_TILE=128x128).
step ab timeout 55 python3 bench/sm90_window_ab.py base=$B/base/libflashbox.so c1=$B/c1/libflashbox.so \
  c2=$B/c2/libflashbox.so --configs 64:12,128:16 --seqlens 16384 --windows 1024 --rounds 3 --json "$O/window_ab.json"
grep -E "^(==|rc=)" "$log" | tail -30
