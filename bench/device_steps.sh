# What the device scripts (bench/*_device_run.sh, device_final_run.sh) share; sourced, after set -u:
#   . "$(dirname "$0")/device_steps.sh" TARBALL NAME STEPS
# Unpacks TARBALL (prebuilt binaries, lib/ with the non-system libraries they link) into
# B=/tmp/fb_NAME; sets O ($OUT, else /tmp/NAME_out), log=$O/run.log and ONLY=",STEPS," ("all" runs
# every step); exports LD_LIBRARY_PATH (the CUDA toolkit's, then $B/lib), PYTHONUNBUFFERED=1,
# FLASHBOX_LIBRARY=$B/libflashbox.so and PYTHONPATH=python. Then
#   step NAME CMD...
# runs CMD when NAME is selected, its output appended to the log, and prints "== NAME" and
# "rc=RC (S s)" to the log and stdout: every step gets its own timeout in CMD, so one hang costs a
# step, not the call, and what ran is under $OUT when a device call ends early. And
#   tstep NAME LIMIT CMD...
# runs step NAME under `timeout` of at most LIMIT seconds and what is left before $DEADLINE (epoch
# seconds, set by the script before its first tstep), less 2; under 5 s left, it logs the step as
# skipped. And
#   begin_call SECONDS
# starts a call of SECONDS in all: exports OMP_NUM_THREADS=16 and the CUDA toolkit's bin/ on PATH,
# sets DEADLINE, and logs the GPU's name, driver, clocks and power. And
#   final_suites [EXTRA_STEPS]
# runs bench/device_final_run.sh on the same tarball for its test suites and compute-sanitizer steps
# (FINAL_SUITES), plus EXTRA_STEPS (comma-separated), in the time left before $DEADLINE, less 5; its
# lines go to the same $log. And
#   ncu_raw REPORT TERM...
# prints the metrics of an Nsight Compute report's raw page whose names hold any TERM (lower case), one
# "name value unit" line each. And
#   ncu_limit NAME CAP
# prints the seconds an Nsight Compute run may take: what is left before $DEADLINE less 10, at most CAP;
# under 15 s it says "ncu NAME: no time left" (stderr) and returns 2. And
#   ncu_summary REPORT NAME LABEL TERM...
# appends the report's details page and its raw metrics holding any TERM (ncu_raw) to $O/ncu_summary.txt,
# under "######## NAME details" and "######## NAME raw (LABEL)". A script that packs its own tarball does so with bench/pack_final.sh
# (its --pack mode).
O=${OUT:-/tmp/$2_out}; mkdir -p "$O"
B=/tmp/fb_$2; mkdir -p "$B" && tar -xf "$1" -C "$B"  # .tar.gz, or .tar.xz (one xz stream dedupes the
# binaries' identical device code: a whole check's binaries in 12 MB instead of 69)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/libflashbox.so PYTHONPATH=python
log="$O/run.log"
ONLY=",$3,"
TARBALL=$1
FINAL_SUITES=test_backward,test_cuda,test_sm90,test_sm90_mods,test_sm90_bwd_mods,test_sm90_bwd_d256,test_sm90_bwd_d192
FINAL_SUITES=$FINAL_SUITES,test_sm90_bwd_d96,test_sm90_bwd_pad_dims,test_sm90_varlen,test_sm90_bwd_varlen
FINAL_SUITES=$FINAL_SUITES,memcheck,memcheck_fwd,memcheck_mods,memcheck_varlen,memcheck_varlen_bwd,memcheck_bwd_d256,memcheck_ext
step() {
  case "$ONLY" in *,all,*|*",$1,"*) ;; *) return 0 ;; esac
  local s=$(date +%s); echo "== $1" | tee -a "$log"; shift; "$@" >>"$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
tstep() {
  local name=$1 limit=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) - 2 ))
  (( left < limit )) && limit=$left
  if (( limit < 5 )); then echo "== $name skipped (no time left)" | tee -a "$log"; return 0; fi
  step "$name" timeout $limit "$@"
}
begin_call() {
  export OMP_NUM_THREADS=16 PATH=/usr/local/cuda/bin:$PATH
  DEADLINE=$(( $(date +%s) + $1 ))
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee -a "$log"
}
# Issue 15's bar as step `bar` (LIMIT seconds): the causal backward at T 1024-16384 against SDPA's
# backends in one compare_sdpa.py process, into $O/compare_sdpa_bwd.json.
bwd_bar() {
  tstep bar "$1" python3 "$(dirname "${BASH_SOURCE[0]}")/compare_sdpa.py" $B/libflashbox.so --backward --no-naive \
    --seqlens 1024,2048,4096,8192,16384 --json "$O/compare_sdpa_bwd.json"
}
# The backward's phases kernel by kernel (bwd_phase_profile.py, 40 s each) with the run-time switch
# VAR as the library has it (phases_new) and with VAR=0 (phases_off), into $O/phases_{new,off}.json.
bwd_phases_on_off() {
  local profile="$(dirname "${BASH_SOURCE[0]}")/bwd_phase_profile.py"
  tstep phases_new 40 python3 "$profile" $B/libflashbox.so --json "$O/phases_new.json"
  tstep phases_off 40 env "$1=0" python3 "$profile" $B/libflashbox.so --json "$O/phases_off.json"
}
final_suites() {
  local left=$(( DEADLINE - $(date +%s) - 5 ))
  timeout $left bash "$(dirname "${BASH_SOURCE[0]}")/device_final_run.sh" "$TARBALL" "$FINAL_SUITES${1:+,$1}" > /dev/null 2>&1
}
ncu_raw() {
  local rep=$1; shift
  timeout 15 ncu -i "$rep" --page raw --csv | python3 -c '
import csv, sys
terms = sys.argv[1:]
rows = list(csv.reader(sys.stdin))
for name, unit, val in zip(rows[0], rows[1], rows[2]):
    if any(t in name.lower() for t in terms):
        print(f"{name:90s} {val:>16s} {unit}")' "$@"
}
ncu_limit() {
  local lim=$(( DEADLINE - $(date +%s) - 10 ))
  (( lim >= 15 )) || { echo "ncu $1: no time left" >&2; return 2; }
  echo $(( lim < $2 ? lim : $2 ))
}
ncu_summary() {
  local rep=$1 name=$2 label=$3; shift 3
  { echo "######## $name details"; timeout 15 ncu -i "$rep" --page details
    echo "######## $name raw ($label)"
    ncu_raw "$rep" "$@"
  } >> "$O/ncu_summary.txt"
}
