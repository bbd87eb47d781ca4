#!/usr/bin/env python3
"""Instruction mix and stall samples by opcode from Nsight Compute's source page (SASS), as written by
bench/fwd_mods_profile_device_run.sh (src_NAME.csv.gz in the current folder):
  python3 bench/ncu_sass_mix.py d128_softcap d128_plain ...
For each NAME: the share of executed instructions and of warp-stall samples per opcode (MUFU ops by
function), and the stall reasons over all instructions."""
import csv, gzip, sys, collections
def load(p):
    rows = list(csv.reader(gzip.open(p, 'rt')))
    h = rows[1]; body = [r for r in rows[2:] if len(r) == len(h)]
    return h, body
for name in sys.argv[1:]:
    h, body = load(f"src_{name}.csv.gz")
    ix = {c: i for i, c in enumerate(h)}
    num = lambda r, c: float(r[ix[c]] or 0) if r[ix[c]] not in ('-', '') else 0.0
    tot_s = sum(num(r, "Warp Stall Sampling (All Samples)") for r in body)
    tot_i = sum(num(r, "Instructions Executed") for r in body)
    ops = collections.Counter(); stall_by_op = collections.Counter()
    reasons = collections.Counter()
    for r in body:
        op = r[ix["Source"]].split()[0] if r[ix["Source"]].split() else '?'
        if op.startswith('@'): op = r[ix["Source"]].split()[1]
        base = op.split('.')[0] if not op.startswith('MUFU') else op
        ops[base] += num(r, "Instructions Executed")
        stall_by_op[base] += num(r, "Warp Stall Sampling (All Samples)")
        for c in h:
            if c.startswith("stall_") and "Not Issued" not in c:
                reasons[c] += num(r, c)
    print(f"=== {name}: instructions executed {tot_i:.3e}, samples {tot_s:.0f}, static {len(body)}")
    for op, n in ops.most_common(22):
        print(f"  {op:14s} {n/tot_i*100:5.1f} % inst  {stall_by_op[op]/tot_s*100:5.1f} % samples")
    print("  reasons:", ", ".join(f"{k[6:]} {v/tot_s*100:.1f}" for k, v in reasons.most_common(9)))
