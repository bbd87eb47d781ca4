#!/usr/bin/env bash
# One device call (2026-12-02): the sm90 forward's MODS kernels with EXP2_EMU8 of every 8 exponentials
# on the FMA pipe (online_softmax.cuh exp2_fma; bench/NOTES.md sm90 forward "exp2 on the FMA pipe").
# The tarball holds emu0, emu2, emu4, emu6 (kModsExp2Emu8 in flash_fwd_sm90_d64.cu / _d128.cu), each a
# libflashbox.so and its test_sm90_mods, plus lib/ (pack_final.sh's runtimes).
#   tests  test_sm90_mods of every build (fp64 reference: softcap, ALiBi, windows, d64/d128, bf16/fp16)
#   ab     bench/sm90_window_ab.py --mods: the four builds interleaved in one process, 3 rounds, B4 bf16,
#          D64 H12 and D128 H16, T 4096 and 16384: plain, softcap 30 causal / full, ALiBi causal
# (Its tests step ran nothing: `timeout` cannot run a shell function; the A/B ran.) The code it measured
# (exp2_fma, FwdConfig's EXP2_EMU8, kModsExp2Emu8) was never committed: it lost and was deleted before the
# commit; bench/NOTES.md describes it. A rerun needs it written again.
# Device call: run(command="bash bench/sm90_fwd_exp2fma_device_run.sh .carry/lead/emu.tar.gz 270",
#   carry=[".carry/lead"], timeout_s=280)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/device_steps.sh" "$1" exp2fma "${3:-all}"
begin_call ${2:-270}
tests() {
  local worst=0 r
  for v in emu0 emu2 emu4 emu6; do
    OMP_NUM_THREADS=16 timeout 40 $B/$v/test_sm90_mods --gtest_brief=1 > "/tmp/$v.log" 2>&1; r=$?
    echo "$v test_sm90_mods rc=$r: $(grep -E 'PASSED|FAILED' /tmp/$v.log | tr '\n' ' ')"; (( r > worst )) && worst=$r
    { echo "######## $v"; cat "/tmp/$v.log"; } >> "$O/tests.log"
  done
  return $worst
}
tstep tests 170 tests
tstep ab 200 python3 "$here/sm90_window_ab.py" e0=$B/emu0/libflashbox.so e2=$B/emu2/libflashbox.so \
  e4=$B/emu4/libflashbox.so e6=$B/emu6/libflashbox.so --mods --configs 64:12,128:16 --seqlens 4096,16384 \
  --rounds 3 --json "$O/ab.json"
grep -E "^(==|rc=)|PASSED|FAILED|^D(64|128) |ERROR" "$log" | tail -40
