"""Runs one of FlashAttention-2's test functions on a seeded random sample of its own parameter grid.

    python3 bench/fa2_compat/run_sampled.py TEST_FILE FUNCTION [--sample N] [--seed S] [--log FILE]
        [--where name=value,...]

Some of FA2's tests have far more parameter combinations than one device call can run
(test_flash_attn_kvcache: ~300k, and pytest needs minutes just to generate them), so this reads the
function's @pytest.mark.parametrize lists, draws N combinations (every value of every parameter is
drawn about equally often; `--where` pins some), and calls the test function itself with each: the
test's own code decides pass, skip (pytest.skip) or fail. Prints one line per failure and the
counts; exit status 1 if any case failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
import traceback


def parametrize_lists(fn):
    """[(argnames tuple, [value tuples])] from the function's parametrize marks."""
    out = []
    for mark in getattr(fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], list(mark.args[1])
        names = tuple(n.strip() for n in names.split(",")) if isinstance(names, str) else tuple(names)
        values = [v if len(names) > 1 else (v,) for v in values]
        out.append((names, values))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("test_file")
    ap.add_argument("function")
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log", default="")
    ap.add_argument("--where", default="", help="pin parameters: name=python-literal,...")
    args = ap.parse_args()

    import pytest  # noqa: F401  (the test module imports it; Skipped comes from it)
    from _pytest.outcomes import Failed, Skipped

    spec = importlib.util.spec_from_file_location("fa2_test_module", args.test_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, args.function)
    lists = parametrize_lists(fn)
    pinned = {}
    for item in filter(None, args.where.split(",")):
        k, v = item.split("=", 1)
        pinned[k.strip()] = eval(v, {"None": None, "True": True, "False": False})  # noqa: S307 (a test tool)
    total = 1
    for _, values in lists:
        total *= len(values)
    rng = random.Random(args.seed)
    seen, cases = set(), []
    attempts = 0
    while len(cases) < args.sample and attempts < args.sample * 50:
        attempts += 1
        picks = tuple(rng.randrange(len(values)) for _, values in lists)
        if picks in seen:
            continue
        kwargs = {}
        for (names, values), i in zip(lists, picks):
            kwargs.update(zip(names, values[i]))
        if any(k in kwargs and kwargs[k] != v for k, v in pinned.items()):
            continue
        seen.add(picks)
        cases.append(kwargs)
    print(f"{args.function}: {len(cases)} of {total} combinations (seed {args.seed})", flush=True)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures = []
    t0 = time.time()
    for kwargs in cases:
        try:
            fn(**kwargs)
            counts["passed"] += 1
        except Skipped:
            counts["skipped"] += 1
        except (Exception, Failed) as e:  # noqa: BLE001  (every failure is reported; pytest's Failed is a BaseException)
            counts["failed"] += 1
            msg = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines()[-1][:300]
            failures.append({"params": {k: repr(v) for k, v in kwargs.items()}, "error": msg})
            print(f"FAILED {kwargs}: {msg}", flush=True)
    line = (f"{args.function}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
            f"of {len(cases)} sampled ({time.time() - t0:.0f} s)")
    print(line, flush=True)
    if args.log:
        with open(args.log, "w") as f:
            json.dump({"function": args.function, "grid": total, "seed": args.seed, "counts": counts,
                       "failures": failures}, f, indent=1)
    sys.exit(1 if counts["failed"] else 0)


if __name__ == "__main__":
    main()
