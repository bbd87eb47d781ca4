#!/usr/bin/env python3
"""FlashAttention-2's own test functions (tests/test_flash_attn.py) called directly on a random sample
of their parameter matrix, against flashbox through tests/python/fa2_compat (the flash_attn names).

pytest collects every parametrisation of a function before it filters (~85k for
test_flash_attn_output: longer than a short device call); this driver reads the functions'
@pytest.mark.parametrize marks, keeps the combinations that pass --where (dropout 0 always; head
dims up to --max-d), shuffles them with --seed and runs each function for --seconds, calling the
function itself (so FA2's assertions, references and tolerances are exactly its own). A case that
calls pytest.skip counts as skipped. Prints one line per function (passed / failed / skipped of the
cases run, of how many in the filtered matrix) and every failure's parameters and first line.
  PYTHONPATH=tests/python/fa2_compat:python python3 tests/python/fa2_compat/fa2_direct.py TEST_FILE [--functions a,b] [--seconds 10]
The whole matrix (about 103,000 cases without dropout, 50-100 a second per process on the H200):
--seconds 0 and --shard I/N, the N shards run side by side by tests/python/fa2_compat/fa2_matrix.sh.
"""
import argparse
import importlib.util
import itertools
import json
import os
import random
import sys
import time
import traceback

import pytest


def parameter_matrix(fn):
    marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
    axes = []
    for m in marks:
        names = [n.strip() for n in m.args[0].split(",")] if isinstance(m.args[0], str) else list(m.args[0])
        values = [v if len(names) > 1 else (v,) for v in m.args[1]]
        axes.append((names, values))
    for combo in itertools.product(*(vals for _, vals in axes)):
        kw = {}
        for (names, _), vals in zip(axes, combo):
            kw.update(zip(names, vals))
        yield kw


# The functions whose paged-KV cases flashbox runs: the KV-cache ones (flashbox.kvcache). Elsewhere a
# paged case differentiates through the paged varlen call, which is forward-only in flashbox.
PAGED_OK = {"test_flash_attn_kvcache", "test_flash_attn_kvcache_paged_block_table_bounds",
            "test_flash_attn_varlen_paged_kv_num_splits"}


def keep(kw, max_d, paged_ok, head_dims=None):
    if kw.get("dropout_p", 0.0) != 0.0:
        return False  # flashbox has no dropout
    if kw.get("d", 0) > max_d:
        return False
    if head_dims is not None and kw.get("d") not in head_dims:
        return False
    if kw.get("paged_kv_block_size") is not None and not paged_ok:
        return False
    return True


def write_json(path, summary):
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("test_file")
    ap.add_argument("--functions", default="test_flash_attn_output,test_flash_attn_qkvpacked,"
                    "test_flash_attn_varlen_output,test_flash_attn_causal,test_flash_attn_varlen_causal,"
                    "test_flash_attn_splitkv,test_flash_attn_race_condition,test_flash_attn_bwd_overflow,"
                    "test_flash_attn_bwd_transpose,test_flash_attn_deterministic")
    ap.add_argument("--seconds", type=float, default=10.0, help="time per function (0: no limit)")
    ap.add_argument("--shard", default="0/1", metavar="I/N",
                    help="run only the I-th of N slices of each shuffled matrix (the whole matrix over N calls)")
    ap.add_argument("--max-d", type=int, default=256)
    ap.add_argument("--head-dims", metavar="D,D,...",
                    help="keep only cases of these head dims (a route that changed: its slice of the matrix)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", metavar="JSON",
                    help="run only these cases: {function: [index in the shuffled matrix, ...]} (tests/python/fa2_compat/fa2_matrix.sh "
                         "retries the shards' out-of-memory cases this way, one process alone on the GPU)")
    ap.add_argument("--json")
    a = ap.parse_args()
    only = None
    if a.only:
        with open(a.only) as f:
            only = json.load(f)
    head_dims = {int(x) for x in a.head_dims.split(",")} if a.head_dims else None
    shard, shards = (int(x) for x in a.shard.split("/"))
    if not 0 <= shard < shards:
        ap.error(f"--shard {a.shard}: I must be in [0, N)")
    spec = importlib.util.spec_from_file_location("fa2_tests", a.test_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch = sys.modules.get("torch")  # imported by FA2's test file
    # "_functions": what this shard was asked to run, so a merge can tell a function that never
    # started (a shard cut off before it) from one that is not in the run.
    names = list(only) if only is not None else a.functions.split(",")
    summary = {"_functions": names}
    for name in names:
        fn = getattr(mod, name)
        cases = [kw for kw in parameter_matrix(fn) if keep(kw, a.max_d, name in PAGED_OK, head_dims)]
        random.Random(a.seed).shuffle(cases)
        counts = {"passed": 0, "failed": 0, "skipped": 0, "matrix": len(cases)}
        # Each case keeps its index in the shuffled matrix (failures report it; --only selects by it).
        indexed = list(enumerate(cases))
        cases = [indexed[i] for i in only[name]] if only is not None else indexed[shard::shards]
        counts["slice"] = len(cases)  # this shard's share of the matrix: all of it ran when passed+failed+skipped == slice
        failures = []
        summary[name] = dict(counts, failures=failures)
        end = time.time() + a.seconds if a.seconds > 0 else float("inf")
        for i, (index, kw) in enumerate(cases):
            if time.time() > end:
                break
            if i and i % 500 == 0:
                summary[name] = dict(counts, failures=failures)
                write_json(a.json, summary)  # a shard cut off by its time limit still reports what it ran
                if i % 2000 == 0:
                    print(f"  {name}: {i} of {len(cases)} cases ({counts['failed']} failed)", flush=True)
            if only is not None:
                counts.setdefault("indices_run", []).append(index)  # what a merge replaces (fa2_matrix_merge.py)
            try:
                fn(**kw)
                counts["passed"] += 1
            except pytest.skip.Exception:
                counts["skipped"] += 1
            except (Exception, pytest.fail.Exception) as e:  # noqa: BLE001 (a failure, reported; pytest's is a BaseException)
                counts["failed"] += 1
                line = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
                # Out of memory: the shards share one GPU, so such a case is retried alone (fa2_matrix.sh).
                oom = "OutOfMemory" in type(e).__name__ or "OUT_OF_MEMORY" in line or "out of memory" in line
                failures.append({"params": {k: str(v) for k, v in kw.items()}, "error": f"{type(e).__name__}: {line}",
                                 "index": index, "oom": oom})
                if len(failures) <= 3:
                    traceback.print_exc(limit=2)
            finally:
                # Shards share the GPU: hand the case's cached blocks back so that one process's peak
                # (the seqlen_k = 100,000 cases hold ~10 GB) does not starve the others. Alone on the
                # GPU (one shard, or the retry) a process keeps its cache.
                if torch is not None and shards > 1 and only is None:
                    torch.cuda.empty_cache()
        summary[name] = dict(counts, failures=failures)
        write_json(a.json, summary)
        print(f"{name}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
              f"(of {counts['matrix']} in the matrix with dropout 0, d <= {a.max_d}"
              f"{', d in ' + a.head_dims if a.head_dims else ''}; seed {a.seed}, shard {a.shard})",
              flush=True)
        for f in failures[:10]:
            print(f"   FAILED {f['params']}: {f['error']}", flush=True)
    write_json(a.json, summary)
    sys.exit(1 if any(v["failed"] for k, v in summary.items() if not k.startswith("_")) else 0)


if __name__ == "__main__":
    main()
