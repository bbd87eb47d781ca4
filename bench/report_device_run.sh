#!/usr/bin/env bash
# The user's path on a GPU machine, in one call: `flashbox report` with PyTorch SDPA found on PATH
# (the report times it itself), then `pip install ./python` into a fresh venv and the Python tests
# against the installed package. The GPU machine has no C++ dependencies or node to build with, so
# the binaries come built on the CPU machine from this tree (CUDA arch 90a), with the runtime
# libraries it lacks:
#   bash bench/report_device_run.sh .dev/report.tar.xz   # flashbox, libflashbox.so, rt/ (a folder also works)
# Every step has its own time limit; logs and the report go to $OUT.
set -u
O=${OUT:-/tmp/report_out}; mkdir -p "$O"
B=${1:-.dev/report}
if [ -f "$B" ]; then mkdir -p /tmp/fb && tar -xf "$B" -C /tmp/fb && B=/tmp/fb; fi
B=$(cd "$B" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/rt:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
log="$O/run.log"
step() {
  local name=$1 limit=$2; shift 2
  local s=$(date +%s); echo "== $name" | tee -a "$log"
  timeout "$limit" "$@" >>"$log" 2>&1; local rc=$?
  echo "rc=$rc ($(( $(date +%s) - s )) s)" | tee -a "$log"; return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$log"
python3 -c 'import sys, torch; print(sys.executable, "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tee -a "$log"
# The library beside the CLI, where a build puts it: the report and the install both look there.
mkdir -p build && cp "$B/flashbox" "$B/libflashbox.so" build/
step version 10 ./build/flashbox --version
step report 240 ./build/flashbox report --json "$O/report_h200.json" --html "$O/report_h200.html"
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
step install 150 python3 tests/python/install_check.py --library build/libflashbox.so --pytest --site "$site"
grep -E "^(==|rc=)|FAIL|criteria" "$log" | tail -30
