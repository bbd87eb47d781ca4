#!/usr/bin/env bash
# Every test on a GPU machine, for one or more CUDA architecture lists: each list gets its own build
# (build-gpu-<archs>: the library, the CLI and every test), the builds run side by side, then ctest
# runs in each, one build at a time, where the GPU tests run instead of skipping. The first list runs
# every test; each further list runs the tests whose code the architectures change (all but the cpu,
# docs, web and fuzz labels, which run host code only). One summary line per build on stdout;
# configure, build and test logs in OUT_DIR.
#   tests/gpu.sh OUT_DIR [ARCHS ...]          e.g. tests/gpu.sh /tmp/gpu "80;90a" 90a 80
# ARCHS defaults to the project's list. A machine without the build's Debian packages can be given
# them as .deb files: DEPS_DEBS=DIR (libcli11-dev, nlohmann-json3-dev, libfmt-dev, libfmt9, libgtest-dev, …,
# fetched with `apt-get download`) are unpacked into a private prefix that CMake searches.
# A machine without node takes a page template built elsewhere: PAGE_TEMPLATE=FILE (made with
# `npm run build -- --out FILE` in web/). CTEST_ARGS adds ctest arguments (e.g. "-L python").
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tests/gpu.sh OUT_DIR [ARCHS ...]}
shift
mkdir -p "$out"
archs=("$@")
((${#archs[@]})) || archs=("80;90a")
prefix_args=()
if [ -n "${DEPS_DEBS:-}" ]; then
  prefix=$PWD/build-deps-prefix
  mkdir -p "$prefix"
  for f in "$DEPS_DEBS"/*.deb; do dpkg -x "$f" "$prefix"; done
  prefix_args=("-DCMAKE_PREFIX_PATH=$prefix/usr")
fi
[ -n "${PAGE_TEMPLATE:-}" ] && prefix_args+=("-DFLASHBOX_PAGE_TEMPLATE=$(realpath "$PAGE_TEMPLATE")")
name() { echo "build-gpu-${1//;/_}"; }
jobs=$(($(nproc) / ${#archs[@]} + 1))
start=$(date +%s)
for a in "${archs[@]}"; do
  b=$(name "$a")
  (cmake -S . -B "$b" -G Ninja "-DFLASHBOX_CUDA_ARCHS=$a" "${prefix_args[@]}" > "$out/$b.configure.log" 2>&1 &&
    cmake --build "$b" -j "$jobs" > "$out/$b.build.log" 2>&1
   echo $? > "$out/$b.build_rc") &
done
wait
echo "builds: $(($(date +%s) - start)) s"
rc=0
first=1
for a in "${archs[@]}"; do
  b=$(name "$a")
  if [ "$(cat "$out/$b.build_rc" 2>/dev/null)" != 0 ]; then
    echo "archs $a: build failed (see $out/$b.configure.log, $out/$b.build.log)"
    tail -5 "$out/$b.build.log" 2>/dev/null || tail -5 "$out/$b.configure.log"
    rc=1
    continue
  fi
  t0=$(date +%s)
  select=()
  ((first)) || select=(-LE '^(cpu|docs|web|fuzz)$')
  first=0
  # shellcheck disable=SC2086
  ctest --test-dir "$b" -j 4 --output-on-failure "${select[@]}" ${CTEST_ARGS:-} > "$out/$b.ctest.log" 2>&1 || rc=1
  echo "archs $a: $(grep -E 'tests passed' "$out/$b.ctest.log" | tail -1) ($(($(date +%s) - t0)) s)"
  grep -E '\(Failed\)|\(Timeout\)|\*\*\*' "$out/$b.ctest.log" | head -20
  grep -h -A1 ': Skipped$' "$b/Testing/Temporary/LastTest.log" 2>/dev/null | grep -v -e '^--$' -e ': Skipped$' |
    sort | uniq -c | sed 's/^ */  skipped: /'
done
exit $rc
