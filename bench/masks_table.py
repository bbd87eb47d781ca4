#!/usr/bin/env python3
"""The cost bar's rows of bench/compare_masks.py's JSON as one markdown table, against an earlier run's
JSON when given ("new (old)" in every cell): per head_dim and T, the plain kernel's TFLOP/s (causal /
full), softcap 30 and ALiBi over plain at the same mask, window 1024 over the plain kernel at the same
work (compare_masks.py's same-work peer; causal / two-sided), and window 1024 + softcap 30 over plain.
  python3 bench/masks_table.py NEW.json [OLD.json]
"""
import json
import sys


def index(path):
    with open(path) as f:
        rows = json.load(f)["rows"]
    return {(r["head_dim"], r["seqlen"], r["variant"], r["causal"]): r for r in rows if r["impl"] == "flashbox"}


def cells(ix, D, T):
    def get(variant, causal, key, t=T):
        r = ix.get((D, t, variant, causal))
        return r.get(key) if r else None
    return {
        "plain": (get("plain", True, "tflops"), get("plain", False, "tflops")),
        "softcap": (get("softcap30", True, "vs_plain"), get("softcap30", False, "vs_plain")),
        "alibi": (get("alibi", True, "vs_plain"),),
        "window": (get("window1024", True, "vs_same_work"), get("window1024", False, "vs_same_work")),
        "window_vs_plain": (get("window1024", True, "vs_plain"), get("window1024", False, "vs_plain")),
        "window_softcap": (get("window1024_softcap30", True, "vs_plain"),),
    }


def fmt(new, old, digits):
    def one(x):
        return "-" if x is None else f"{x:.{digits}f}"
    s = " · ".join(one(x) for x in new)
    if old is not None:
        s += " (" + " · ".join(one(x) for x in old) + ")"
    return s


def main():
    new = index(sys.argv[1])
    old = index(sys.argv[2]) if len(sys.argv) > 2 else None
    keys = sorted({(d, t) for d, t, v, _ in new if v == "plain"})
    print("| D, T | plain TFLOP/s causal · full | softcap 30 / plain, causal · full | ALiBi / plain | "
          "window 1024 / same work, causal · two-sided | window 1024 / plain | window + softcap / plain |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for D, T in keys:
        n = cells(new, D, T)
        o = cells(old, D, T) if old else {}
        print(f"| D{D} T{T} | {fmt(n['plain'], o.get('plain'), 0)} | {fmt(n['softcap'], o.get('softcap'), 3)} | "
              f"{fmt(n['alibi'], o.get('alibi'), 3)} | {fmt(n['window'], o.get('window'), 3)} | "
              f"{fmt(n['window_vs_plain'], o.get('window_vs_plain'), 3)} | {fmt(n['window_softcap'], o.get('window_softcap'), 3)} |")


if __name__ == "__main__":
    main()
