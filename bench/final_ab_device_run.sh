#!/usr/bin/env bash
# One device call that decides a backward change and checks the merged main with it: the A/B and
# tests of bench/sm90_bwd_dsstm_device_run.sh (test_backward's GPU tests, the sm90 backward suites,
# memcheck and racecheck on the small shapes, sm90_bwd_variants.py new / old / cuDNN) into $OUT/ab,
# then device_final_run.sh's steps for what the change also reaches (test_cuda, the varlen, d256 and
# d192 backward suites, compare_sdpa.py --backward over T 1024 … 16384, compare_masks.py --backward)
# into $OUT/fin; at the end the logs go into one archive (the device returns a limited number of
# files) beside the run logs and the JSONs the notes cite.
#   OLD_LIB=<old libflashbox.so> bash bench/pack_final.sh .carry/final/x.tar.gz build-cuda test_backward \
#     test_sm90_bwd_mods test_sm90_bwd_d96 test_sm90_bwd_pad_dims test_cuda test_sm90_bwd_varlen \
#     test_sm90_bwd_d256 test_sm90_bwd_d192
#   run(command="bash bench/final_ab_device_run.sh .carry/final/x.tar.gz", carry=[".carry/final"], timeout_s=330)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=${OUT:-/tmp/final_ab_out}
OUT=$root/ab bash "$here/sm90_bwd_dsstm_device_run.sh" "$1" "${2:-175}" tests,variants
OUT=$root/fin bash "$here/device_final_run.sh" "$1" \
  test_cuda,test_sm90_bwd_varlen,test_sm90_bwd_d256,test_sm90_bwd_d192,compare_bwd,compare_masks_bwd | tail -40
cd "$root" && tar -czf logs.tar.gz ab fin && mkdir -p keep &&
  for f in ab/run.log:ab_run.log fin/run.log:fin_run.log ab/variants.json:variants.json fin/compare_bwd.json:compare_bwd.json fin/compare_masks_bwd.json:compare_masks_bwd.json; do
    [ -f "${f%%:*}" ] && cp "${f%%:*}" "keep/${f##*:}"
  done
rm -rf ab fin
