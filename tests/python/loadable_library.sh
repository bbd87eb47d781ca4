# Sourced by the conformance runners (fa2_compat/run_fa2_tests.sh, fa3_compat/run_fa3_tests.sh), from
# the repository root: sets LIB to a libflashbox.so that loads in $PY (default python3): $FLASHBOX_LIBRARY,
# else build/libflashbox.so, else one built now into build/ (90a, library target only; its log in
# $RESULTS/build.log). Exits the runner when that build fails.
loads() { [ -f "$1" ] && "${PY:-python3}" -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$1" 2>/dev/null; }
LIB=${FLASHBOX_LIBRARY:-}
for cand in "$LIB" build/libflashbox.so; do
  if [ -n "$cand" ] && loads "$cand"; then LIB=$cand; break; fi
  LIB=
done
if [ -z "$LIB" ]; then
  echo "== building libflashbox (no loadable library found)"
  cmake -S . -B build -G Ninja -DFLASHBOX_CUDA_ARCHS=90a > "$RESULTS/build.log" 2>&1 &&
    cmake --build build -j"$(nproc)" --target flashbox_library >> "$RESULTS/build.log" 2>&1 || { tail -30 "$RESULTS/build.log"; exit 1; }
  LIB=build/libflashbox.so
fi
