#!/usr/bin/env python3
"""Adds up the shard JSONs of tests/python/fa2_compat/fa2_matrix.sh: per function, passed / failed / skipped over the
cases run, the matrix size, and whether the whole matrix ran (every shard present and finished its
slice). Prints every failure's parameters. Exit 1 on any failure or any case not run.
  python3 tests/python/fa2_compat/fa2_matrix_merge.py OUT/shard_*.json --shards N [--json OUT/matrix.json]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shards_json", nargs="+")
    ap.add_argument("--shards", type=int, required=True, help="how many shards were started")
    ap.add_argument("--oom-list", metavar="JSON",
                    help="write {function: [matrix index, ...]} of the out-of-memory failures (to retry them alone)")
    ap.add_argument("--retry", metavar="JSON",
                    help="fa2_direct.py --only's result: its outcomes replace the failures of the cases it ran")
    ap.add_argument("--json")
    a = ap.parse_args()
    per_shard = []
    for p in a.shards_json:
        try:
            with open(p) as f:
                per_shard.append(json.load(f))
        except (OSError, json.JSONDecodeError) as e:
            print(f"{p}: unreadable ({e})")
    names = []  # the functions the shards were asked to run, then any they report
    for s in per_shard:
        for n in s.get("_functions", []) + list(s):
            if n not in names and not n.startswith("_"):
                names.append(n)
    retry = None
    if a.retry:
        try:
            with open(a.retry) as f:
                retry = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            print(f"{a.retry}: unreadable ({e}); the out-of-memory failures stand")
    total = {}
    complete = len(per_shard) == a.shards
    for n in names:
        t = {"passed": 0, "failed": 0, "skipped": 0, "matrix": 0, "shards_done": 0, "failures": []}
        for s in per_shard:
            c = s.get(n)
            if c is None:
                continue
            for k in ("passed", "failed", "skipped"):
                t[k] += c[k]
            t["matrix"] = c["matrix"]
            t["failures"] += c["failures"]
            t["shards_done"] += c["passed"] + c["failed"] + c["skipped"] == c.get("slice", -1)
        if retry and n in retry:
            # A retried case counted as failed in its shard; its outcome alone on the GPU replaces that.
            r = retry[n]
            again = set(r.get("indices_run", []))
            kept = [f for f in t["failures"] if f.get("index") not in again]
            t["failed"] -= len(t["failures"]) - len(kept)
            t["failures"] = kept + r["failures"]
            for k in ("passed", "failed", "skipped"):
                t[k] += r[k]
            t["retried"] = len(again)
        t["ran"] = t["passed"] + t["failed"] + t["skipped"]
        t["whole"] = t["shards_done"] == a.shards and t["ran"] == t["matrix"]
        complete &= t["whole"]
        total[n] = t
        oom = sum(1 for f in t["failures"] if f.get("oom"))
        print(f"{n}: {t['passed']} passed, {t['failed']} failed ({oom} out of memory), {t['skipped']} skipped; "
              f"ran {t['ran']} of {t['matrix']} ({'whole matrix' if t['whole'] else 'NOT the whole matrix'})"
              + (f"; {t['retried']} out-of-memory cases retried alone" if "retried" in t else ""))
        for f in t["failures"][:20]:
            print(f"   FAILED {f['params']}: {f['error']}")
    ran = sum(t["ran"] for t in total.values())
    matrix = sum(t["matrix"] for t in total.values())
    failed = sum(t["failed"] for t in total.values())
    print(f"all functions: ran {ran} of {matrix} cases, {failed} failed; "
          f"{'every case ran' if complete else 'NOT every case ran'}")
    if a.oom_list:
        with open(a.oom_list, "w") as f:
            json.dump({n: [x["index"] for x in t["failures"] if x.get("oom") and "index" in x]
                       for n, t in total.items() if any(x.get("oom") for x in t["failures"])}, f)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"functions": total, "ran": ran, "matrix": matrix, "failed": failed, "complete": complete}, f, indent=1)
    sys.exit(0 if complete and failed == 0 else 1)


if __name__ == "__main__":
    main()
