#!/usr/bin/env bash
# The backward's half skip (HALF_SKIP: a consumer whose 64 keys see none of a step's rows skips that
# step's dV and dK products and its softmax) on the H200: the backward suites and memcheck of the small
# masked cases on the new build, then the new build against main's ($B/old/libflashbox.so) in one
# process: the W1024 window rows and their same-work peers (sm90_window_ab.py --backward, T 4096 and
# 16384) and the plain causal rows with cuDNN (sm90_bwd_variants.py), then issue 15's bar on the new build.
#   bench/halfskip_device_run.sh TARBALL [ROUNDS (3)]
set -u
. "$(dirname "$0")/device_steps.sh" "$1" halfskip all
begin_call 560
R=${2:-3}
tstep test_sm90_bwd_mods 90 $B/test_sm90_bwd_mods --gtest_brief=1
tstep test_backward 150 $B/test_backward --gtest_brief=1
tstep test_sm90_bwd_varlen 60 $B/test_sm90_bwd_varlen --gtest_brief=1
tstep test_sm90_bwd_d96 40 $B/test_sm90_bwd_d96 --gtest_brief=1
tstep test_sm90_bwd_pad_dims 40 $B/test_sm90_bwd_pad_dims --gtest_brief=1
tstep memcheck_bwd_mods 60 env FLASHBOX_SM90_MODS_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_sm90_bwd_mods --gtest_brief=1 --gtest_filter='Sm90BwdMods.SmallCases'
tstep ab_windows 150 python3 bench/sm90_window_ab.py --backward old=$B/old/libflashbox.so new=$B/libflashbox.so \
  --configs 64:12,128:16 --seqlens 4096,16384 --windows 1024 --rounds $R --json "$O/ab_windows.json"
tstep ab_plain 120 python3 bench/sm90_bwd_variants.py old=$B/old/libflashbox.so new=$B/libflashbox.so --rounds $R \
  --shapes 64:12:1024:1,64:12:16384:1,128:16:1024:1,128:16:4096:1,128:16:16384:1,128:16:16384:0,128:32:8192:1:8 \
  --json "$O/ab_plain.json"
bwd_bar 60
grep -E "^D(64|128) |rc=|passed|FAILED|ERROR" "$log" | head -80
