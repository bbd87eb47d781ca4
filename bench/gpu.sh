#!/usr/bin/env bash
# Runs benchmark suites on a GPU machine: builds build/ with CMake when build/libflashbox.so is missing,
# then bench/run.py with the suites given, writing <suite>.json (and .svg) to OUT_DIR.
#   bench/gpu.sh OUT_DIR [SUITES] [run.py options...]     e.g. bench/gpu.sh results forward,backward,decode --quick
# BUILD_DIR (default build) and ARCHS (CMake's FLASHBOX_CUDA_ARCHS, default: the project's) can be set.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/gpu.sh OUT_DIR [SUITES] [run.py options...]}
suites=${2:-forward,backward,decode}
shift $(( $# >= 2 ? 2 : 1 ))
build=${BUILD_DIR:-build}
if [ ! -f "$build/libflashbox.so" ]; then
  cmake -S . -B "$build" $(command -v ninja >/dev/null && echo -G Ninja) -DCMAKE_BUILD_TYPE=Release ${ARCHS:+-DFLASHBOX_CUDA_ARCHS=$ARCHS}
  cmake --build "$build" --target flashbox_library flashbox_cli -j "$(nproc)"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv,noheader || true
exec python3 bench/run.py --lib "$build/libflashbox.so" --cli "$build/flashbox" --suite "$suites" --out "$out" --plot "$@"
