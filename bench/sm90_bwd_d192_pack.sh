#!/usr/bin/env bash
# Packs what bench/sm90_bwd_d192_device_run.sh needs, on the CPU machine (no GPU): builds the targets
# in BUILD (configured with -G Ninja -DFLASHBOX_CUDA_ARCHS=90a; nice, -j2), archives the source of
# the worktree's HEAD and tars the binaries with the non-system libraries they link (libgomp,
# libopenblas, libgfortran, libquadmath) into /work/main/.carry/bwd192/ (the device call's carry):
#   bash bench/sm90_bwd_d192_pack.sh [BUILD [OLD_LIB]]   (from the worktree root; BUILD defaults to build-cuda)
# OLD_LIB: optionally an earlier libflashbox.so built for 90a (main's, where 136..192 run the d256
# kernel), packed as old/libflashbox.so: the device script then times both in one process if time is left.
set -eu
BUILD=${1:-build-cuda}
C=/work/main/.carry/bwd192
nice ninja -C "$BUILD" -j2 libflashbox.so test_backward test_cuda test_sm90_bwd_d192 test_sm90_bwd_d256 test_sm90_bwd_mods
rm -rf "$C" && mkdir -p "$C/src"
git archive HEAD | tar -x -C "$C/src"
P=$(mktemp -d); mkdir -p "$P/lib"
cp "$BUILD/libflashbox.so" "$BUILD/tests/test_backward" "$BUILD/tests/test_cuda" "$BUILD/tests/sm90/test_sm90_bwd_d192" \
  "$BUILD/tests/sm90/test_sm90_bwd_d256" "$BUILD/tests/sm90/test_sm90_bwd_mods" "$P/"
[ -n "${2:-}" ] && mkdir -p "$P/old" && cp "$2" "$P/old/libflashbox.so"
for l in libgomp.so.1 libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do cp -L /lib/x86_64-linux-gnu/$l "$P/lib/"; done
tar -czf "$C/bin.tar.gz" -C "$P" .
rm -rf "$P"
du -sh "$C"
echo "packed at $(git rev-parse --short HEAD) into $C"
