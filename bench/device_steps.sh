# What the device scripts (bench/*_device_run.sh, device_final_run.sh) share; sourced, after set -u:
#   . "$(dirname "$0")/device_steps.sh" TARBALL NAME STEPS
# Unpacks TARBALL (prebuilt binaries, lib/ with the non-system libraries they link) into
# B=/tmp/fb_NAME; sets O ($OUT, else /tmp/NAME_out), log=$O/run.log and ONLY=",STEPS," ("all" runs
# every step); exports LD_LIBRARY_PATH (the CUDA toolkit's, then $B/lib), PYTHONUNBUFFERED=1,
# FLASHBOX_LIBRARY=$B/libflashbox.so and PYTHONPATH=python. Then
#   step NAME CMD...
# runs CMD when NAME is selected, its output appended to the log, and prints "== NAME" and
# "rc=RC (S s)" to the log and stdout: every step gets its own timeout in CMD, so one hang costs a
# step, not the call, and what ran is under $OUT when a device call ends early.
O=${OUT:-/tmp/$2_out}; mkdir -p "$O"
B=/tmp/fb_$2; mkdir -p "$B" && tar -xzf "$1" -C "$B"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$B/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 FLASHBOX_LIBRARY=$B/libflashbox.so PYTHONPATH=python
log="$O/run.log"
ONLY=",$3,"
step() {
  case "$ONLY" in *,all,*|*",$1,"*) ;; *) return 0 ;; esac
  local s=$(date +%s); echo "== $1" | tee -a "$log"; shift; "$@" >>"$log" 2>&1; echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$log"
}
