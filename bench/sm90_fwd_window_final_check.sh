#!/usr/bin/env bash
# What the one device call of branch sm90-fwd-window (bench/sm90_fwd_window_device_run.sh, run 1)
# left out, for the kernel as it is on the branch (9e5d70b: change 1, the group walk): the varlen
# forward tests (varlen tiles take the group walk too), the window tests, and compute-sanitizer
# memcheck on the small window and varlen shapes. Prebuilt binaries come as a tarball (built on the
# CPU machine, `carry`ed): test_sm90_mods, test_sm90_varlen, test_sm90, lib/ (libgomp, libopenblas,
# libgfortran, libquadmath).
#   bench/sm90_fwd_window_final_check.sh fwdwin_final.tar.gz      (about 60 s; logs under $OUT)
# Packing (CPU machine, build-cuda built for 90a at the branch's head):
#   P=/tmp/fwdwinfinal; rm -rf $P; mkdir -p $P/lib && cp build-cuda/tests/sm90/test_sm90_mods \
#     build-cuda/tests/sm90/test_sm90_varlen build-cuda/tests/sm90/test_sm90 $P/ && for l in libgomp.so.1 \
#     libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do cp -L /lib/x86_64-linux-gnu/$l $P/lib/; done && \
#     tar -czf /work/main/.carry/fwdwin/fwdwin_final.tar.gz -C $P .
# Device call: run(command="cd .carry/fwdwin/src && bash bench/sm90_fwd_window_final_check.sh ../fwdwin_final.tar.gz",
#   carry=[".carry/fwdwin"], timeout_s=90)
set -u
O=${OUT:-/tmp/fwdwin_final_out}; mkdir -p "$O"
B=/tmp/fb_fwdwin_final; mkdir -p $B && tar -xzf "$1" -C $B
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
log="$O/run.log"
step() {
  local s=$(date +%s); echo "== $1" | tee -a "$log"; shift; "$@" >>"$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
step varlen timeout 30 $B/test_sm90_varlen --gtest_brief=1
step groups timeout 20 $B/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.GroupsSkipBlocksTheyDoNotSee'
step memcheck_mods env FLASHBOX_SM90_MODS_SMALL=1 timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_mods --gtest_brief=1 --gtest_filter='Sm90Mods.GroupsSkipBlocksTheyDoNotSee:Sm90Mods.SlidingWindow'
step memcheck_varlen env FLASHBOX_SM90_VARLEN_SMALL=1 timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_varlen --gtest_brief=1
step mods timeout 40 $B/test_sm90_mods --gtest_brief=1 --gtest_filter='-Sm90Mods.GroupsSkipBlocksTheyDoNotSee'
step test_sm90 timeout 30 $B/test_sm90 --gtest_brief=1
grep -E "^(==|rc=)|ERROR SUMMARY|FAILED" "$log" | tail -30
