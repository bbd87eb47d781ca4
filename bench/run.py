#!/usr/bin/env python3
"""flashbox's benchmark harness: named suites timing flashbox and its peers in one process.

Each suite times flashbox (libflashbox.so through ctypes) and every peer present in the same process
(PyTorch SDPA's cuDNN / FlashAttention-2 / memory-efficient backends, FlexAttention compiled,
torch.compile), on the same fresh random tensors, with one timing method (CUDA events, warm-up, L2
cleared, median), checking flashbox's output against a peer in every row. One JSON per suite
(docs/bench-schema.md); scripts/readme_perf.py turns committed ones into README's performance section.

  python3 bench/run.py --lib build/libflashbox.so --suite forward,backward --out results/
  python3 bench/run.py --lib build/libflashbox.so --quick                      # every suite, few rows
  python3 bench/run.py --lib new/libflashbox.so --baseline-lib old/libflashbox.so --suite forward
  python3 bench/run.py --suite decode --peers sdpa_cudnn                        # only the peers named
"""
import argparse
import os
import sys
import time
import types

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

from flashbench import machine, report  # noqa: E402
from flashbench.attention import finish_row  # noqa: E402
from flashbench.suites import SUITES  # noqa: E402


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="suites: " + ", ".join(SUITES))
    ap.add_argument("--lib", default="build/libflashbox.so", help="libflashbox.so to time (default %(default)s)")
    ap.add_argument("--baseline-lib", help="a second libflashbox.so timed as peer 'flashbox_baseline' in the same rows (loaded "
                    "into the same process: on an H100 the second library's decode calls failed with "
                    "cudaErrorInvalidValue, so compare decode in two runs)")
    ap.add_argument("--peers", help="comma list of peers to time (default: every one present), "
                    "e.g. sdpa_cudnn,sdpa_flash")
    ap.add_argument("--cli", default=None, help="the flashbox CLI for the gpt2 suites (default: flashbox beside --lib)")
    ap.add_argument("--suite", default=",".join(SUITES), help="comma list of suites (default: all)")
    ap.add_argument("--quick", action="store_true", help="a few small rows per suite (smoke run)")
    ap.add_argument("--out", help="folder for <suite>.json (and plots)")
    ap.add_argument("--plot", action="store_true", help="<suite>.svg beside the JSON (needs matplotlib)")
    ap.add_argument("--rounds", type=int, default=3, help="timing passes per row, interleaved (pass 0 in order, later passes "
                    "shuffled); each implementation's median of them (default %(default)s)")
    ap.add_argument("--seed", type=int, default=1234, help="row i's inputs use seed + i (default %(default)s)")
    ap.add_argument("--commit", help="flashbox's commit for the JSON (default: git of --lib's folder)")
    ap.add_argument("--baseline-commit", help="the --baseline-lib's commit for the JSON (default: git of its folder)")
    a = ap.parse_args(argv)
    a.suites = [s for s in a.suite.split(",") if s]
    unknown = [s for s in a.suites if s not in SUITES]
    if unknown:
        ap.error(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}")
    return a


def run_suite(name, ctx, args):
    items = SUITES[name](ctx)
    rows, start = [], time.time()
    print(f"[{name}] {len(items)} rows, seed {args.seed} (row i: seed + i)", file=sys.stderr)
    for i, (label, thunk) in enumerate(items):
        done = time.time() - start
        eta = f", eta {done / i * (len(items) - i):.0f} s" if i else ""
        print(f"[{name} {i + 1}/{len(items)}{eta}] {label} (seed {args.seed + i})", file=sys.stderr, flush=True)
        try:
            row = thunk()
        except Exception as e:  # e.g. out of memory for inputs: the row says so, the suite goes on
            row = finish_row({}, args.seed + i, "", 0, {}, None, None, {"row": f"{type(e).__name__}: {e}"[:300]})
        row["label"] = label
        rows.append(row)
        if row["status"] == "fail":
            print(f"  FAIL: error {row['error']} against {row['error_vs']}", file=sys.stderr)
    info = dict(commit=args.commit or machine.commit(args.lib), library=shown_path(ctx.lib.path),
                version=ctx.lib.version, date=machine.now())
    if ctx.baseline:
        info.update(baseline_library=shown_path(ctx.baseline.path), baseline_version=ctx.baseline.version,
                    baseline_commit=args.baseline_commit or machine.commit(args.baseline_lib))
    return report.document(name, ctx.machine, info, rows, args)


def shown_path(path):
    """A library's path as the JSON records it: relative to the repository when inside it (the
    machine's own folders say nothing to a reader), else its file name."""
    root = os.path.dirname(BENCH_DIR)
    path = os.path.abspath(path)
    return os.path.relpath(path, root) if path.startswith(root + os.sep) else os.path.basename(path)


def main(argv=None):
    args = parse(argv if argv is not None else sys.argv[1:])
    try:
        import torch
    except ImportError:
        sys.exit("bench/run.py: needs PyTorch with CUDA (pip install torch); --help works without it")
    if not torch.cuda.is_available():
        sys.exit("bench/run.py: torch sees no CUDA device")
    from flashbench.abi import Library
    if not os.path.exists(args.lib):
        sys.exit(f"bench/run.py: no library at {args.lib} (build it: cmake --build build, or bench/gpu.sh)")
    lib = Library(args.lib)
    ctx = types.SimpleNamespace(lib=lib, baseline=Library(args.baseline_lib) if args.baseline_lib else None,
                                peers=set(args.peers.split(",")) if args.peers else None,
                                quick=args.quick, seed=args.seed, rounds=args.rounds, bench_dir=BENCH_DIR, machine=machine.machine(),
                                cli=args.cli or os.path.join(os.path.dirname(os.path.abspath(args.lib)), "flashbox"))
    failed = 0
    for name in args.suites:
        doc = run_suite(name, ctx, args)
        print(report.table(doc), flush=True)
        failed += sum(r["status"] == "fail" for r in doc["rows"])
        if args.out:
            print(f"wrote {report.write(doc, args.out)}", file=sys.stderr)
            if args.plot:
                path = report.plot(doc, args.out)
                if path:
                    print(f"wrote {path}", file=sys.stderr)
        elif args.plot:
            print("--plot needs --out", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
