#!/usr/bin/env bash
# Packs the binaries bench/device_final_run.sh runs into one slim tarball for a device call, on the
# CPU machine (the device runs in a copy of this tree; `carry` has a 64 MiB limit in all, so only
# binaries travel, not build folders):
#   bash bench/pack_final.sh OUT.tar.gz [BUILD (build)] [TARGET ...]
# With no TARGET it builds and packs the library and the GPU test suites (the steps that decide a
# merge); name more (flashbox, test_decode, test_gpt2, sm90_varlen_bench, ...) when the call runs
# their steps. OLD_LIB=path adds old/libflashbox.so (the A/B steps); FA2_TEST=path adds
# fa2/test_flash_attn.py (FlashAttention-2's tests, fetched, never committed) for the fa2_* steps.
# The non-system libraries the tests link (OpenBLAS and its runtimes, libgomp) go into lib/.
# PACK_NO_BUILD=1 packs what BUILD already holds and runs no ninja there (another's build folder,
# read only: e.g. main's, whose dry run always reports a CMake re-run for its globs).
set -euo pipefail
out=$1 build=${2:-build}
shift $(( $# >= 2 ? 2 : 1 ))
targets=("$@")
((${#targets[@]})) || targets=(test_backward test_cuda test_sm90 test_sm90_mods test_sm90_bwd_mods test_sm90_bwd_d256
  test_sm90_bwd_d192 test_sm90_bwd_d96 test_sm90_bwd_pad_dims test_sm90_varlen test_sm90_bwd_varlen)
[ -n "${PACK_NO_BUILD:-}" ] || nice ninja -C "$build" -j2 libflashbox.so "${targets[@]}"
P=$(mktemp -d)
trap 'rm -rf "$P"' EXIT
mkdir -p "$P/lib"
cp "$build/libflashbox.so" "$P/"
for t in "${targets[@]}"; do
  f=$(find "$build" -name "$t" -type f -perm -u+x -not -path '*/CMakeFiles/*' | head -n1)
  [ -n "$f" ] || { echo "pack_final: no binary $t under $build" >&2; exit 1; }
  cp "$f" "$P/"
done
for l in libgomp.so.1 libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do cp -L "/lib/x86_64-linux-gnu/$l" "$P/lib/"; done
if [ -n "${OLD_LIB:-}" ]; then mkdir -p "$P/old" && cp "$OLD_LIB" "$P/old/libflashbox.so"; fi
if [ -n "${FA2_TEST:-}" ]; then mkdir -p "$P/fa2" && cp "$FA2_TEST" "$P/fa2/test_flash_attn.py"; fi
mkdir -p "$(dirname "$out")"
tar -czf "$out" -C "$P" .
ls -la "$out"
