#!/usr/bin/env python3
"""Builds of libflashbox against each other on the sliding-window rows of compare_masks.py, in one
process, interleaved (sm90 forward v11, bench/NOTES.md).

Each build is NAME=PATH or NAME=PATH:VAR=VALUE[:VAR=VALUE...]: the library is loaded from a copy of
its own (so that two entries of one file are two instances) with the variables set while it reads
the environment (once per process and library, at its first call: FLASHBOX_SM90_TILE,
FLASHBOX_SM90_SCHED, ...), then unset again. For each head_dim:heads and T, the rows are the plain
kernel (causal, full), the windows (causal (W, -1), two-sided (W, W)) and the plain kernel at the
same work as each window (compare_masks.py's T'); every build times every row in turn, ROUNDS times
(triton do_bench median each), and the median of rounds is reported with each build's ratio to the
first. TFLOP/s count 4 B H D per visible (query, key) pair. Each build's window output is checked
against the first build's (rel. error < 1e-2) before timing. --mods: the rows are instead the plain
kernel, softcap 30 (causal, full) and ALiBi (causal; compare_masks.py's slopes): the MODS kernels.
--backward: each build's backward (flashbox_attention_backward_ext after its own forward_ext of the
row) is timed instead, TFLOP/s 2.5 x the forward's count; dQ, dK and dV are checked against the first
build's.
  python3 bench/sm90_window_ab.py base=old/libflashbox.so new=libflashbox.so \\
      t128=libflashbox.so:FLASHBOX_SM90_TILE=128x128 [--configs 64:12,128:16] [--seqlens 16384] \\
      [--windows 1024] [--rounds 3] [--json PATH]
"""
import argparse
import ctypes
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_masks import Ext, ext, visible_pairs  # noqa: E402
from compare_sdpa import (FLASHBOX_FLASH, AttentionArgs, GradArgs, bench, checked, grad_args,  # noqa: E402
                          load_library, make_args, rel_error)


def load(spec, tmp, probe):
    name, rest = spec.split("=", 1)
    path, *env = rest.split(":")
    copy = os.path.join(tmp, f"{name}_libflashbox.so")
    shutil.copy(path, copy)
    saved = {}
    for kv in env:
        k, v = kv.split("=", 1)
        saved[k] = os.environ.get(k)
        os.environ[k] = v
    lib = load_library(copy)
    lib.flashbox_attention_forward_ext.argtypes = [ctypes.POINTER(AttentionArgs), ctypes.POINTER(Ext)]
    lib.flashbox_attention_forward_ext.restype = ctypes.c_int
    lib.flashbox_attention_backward_ext.argtypes = [ctypes.POINTER(GradArgs), ctypes.POINTER(Ext)]
    lib.flashbox_attention_backward_ext.restype = ctypes.c_int
    probe(lib)  # the first call reads the environment
    for k, v in saved.items():
        if v is None:
            del os.environ[k]
        else:
            os.environ[k] = v
    return name, lib


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", metavar="NAME=PATH[:VAR=VALUE...]")
    ap.add_argument("--configs", default="64:12,128:16")
    ap.add_argument("--seqlens", default="16384")
    ap.add_argument("--windows", default="1024")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--mods", action="store_true", help="plain, softcap 30 and ALiBi rows instead of the windows")
    ap.add_argument("--backward", action="store_true", help="time the backward of each row instead")
    ap.add_argument("--json")
    args = ap.parse_args()
    B, dtype = args.batch, torch.bfloat16

    def probe(lib):
        x = torch.randn(1, 1, 64, 64, device="cuda", dtype=dtype)
        o = torch.empty_like(x)
        a = make_args(x, x, x, o, None, FLASHBOX_FLASH, True)
        checked(lib, lib.flashbox_attention_forward(ctypes.byref(a)))
        torch.cuda.synchronize()

    tmp = tempfile.mkdtemp(prefix="fb_ab_")
    libs = dict(load(s, tmp, probe) for s in args.builds)
    print(f"torch {torch.__version__} | {torch.cuda.get_device_name()} | bf16 | builds {args.builds} | "
          f"{'backward' if args.backward else 'forward'} | {args.rounds} rounds interleaved, do_bench median each; TFLOP/s over visible pairs", flush=True)
    rows, failures = [], []
    for cfg in args.configs.split(","):
        D, H = (int(x) for x in cfg.split(":"))
        for T in (int(x) for x in args.seqlens.split(",")):
            cases = [("plain", T, True, (-1, -1)), ("plain", T, False, (-1, -1))]
            if args.mods:
                cases += [("softcap30", T, True, (-1, -1)), ("softcap30", T, False, (-1, -1)), ("alibi", T, True, (-1, -1))]
            for w in ([] if args.mods else (int(x) for x in args.windows.split(","))):
                if w >= T:
                    continue
                for causal, window in ((True, (w, -1)), (False, (w, w))):
                    cases.append((f"window{w}", T, causal, window))
                    pairs = visible_pairs(T, causal, window)
                    t2 = int(round((math.sqrt(2 * pairs) if causal else math.sqrt(pairs)) / 64)) * 64
                    cases.append((f"plain_same_work_as_window{w}", t2, causal, (-1, -1)))
            for variant, t, causal, window in cases:
                gen = torch.Generator(device="cuda").manual_seed(2000 + t + D)
                q, k, v = (torch.randn(B, H, t, D, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
                o = torch.empty_like(q)
                lse = torch.empty(B, H, t, device="cuda", dtype=torch.float32)
                a = make_args(q, k, v, o, lse, FLASHBOX_FLASH, causal)
                slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device="cuda", dtype=torch.float32)
                e = ext(window, 30.0 if variant == "softcap30" else 0.0, slopes if variant == "alibi" else None)
                if args.backward:
                    do = torch.randn(q.shape, device="cuda", dtype=dtype, generator=gen)
                    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                    g = grad_args(a, do, dq, dk, dv)
                calls, kernels, errs, ref = {}, {}, {}, None
                for name, lib in libs.items():
                    call = (lambda lib=lib: lib.flashbox_attention_forward_ext(ctypes.byref(a), ctypes.byref(e)))
                    o.fill_(float("nan"))
                    checked(lib, call())
                    outs = (o,)
                    if args.backward:
                        # Each build's backward runs on its own forward's O and LSE.
                        call = (lambda lib=lib: lib.flashbox_attention_backward_ext(ctypes.byref(g), ctypes.byref(e)))
                        for x in (dq, dk, dv):
                            x.fill_(float("nan"))
                        checked(lib, call())
                        outs = (dq, dk, dv)
                    torch.cuda.synchronize()
                    kernels[name] = lib.flashbox_last_kernel().decode()
                    if ref is None:
                        ref = [x.clone() for x in outs]
                        errs[name] = 0.0 if all(torch.isfinite(x).all() for x in outs) else float("inf")
                    else:
                        errs[name] = max(rel_error(x, r) for x, r in zip(outs, ref))
                    if not errs[name] < 1e-2:
                        failures.append((name, D, t, variant, causal, errs[name]))
                    calls[name] = call
                times = {n: [] for n in libs}
                for _ in range(args.rounds):
                    for n, call in calls.items():
                        times[n].append(bench(call))
                pairs = visible_pairs(t, causal, window)
                work = 2.5 if args.backward else 1.0
                tf = {n: work * 4.0 * B * H * D * pairs / (statistics.median(ms) * 1e-3) / 1e12 for n, ms in times.items()}
                first = next(iter(libs))
                print(f"D{D} H{H} T{t:<6} {variant:28} {'causal' if causal else 'full  '} | " +
                      " ".join(f"{n} {tf[n]:6.1f}" for n in tf) + " | " +
                      " ".join(f"{n}/{first} {tf[n] / tf[first]:.3f}" for n in libs if n != first) + " | " +
                      " ".join(f"{n}:{kernels[n]}" for n in libs), flush=True)
                for n in libs:
                    rows.append(dict(build=n, direction="backward" if args.backward else "forward", head_dim=D, heads=H, batch=B, seqlen=t, variant=variant, causal=causal,
                                     window=list(window), visible_pairs=pairs, ms_rounds=times[n],
                                     ms=statistics.median(times[n]), tflops=tf[n], kernel=kernels[n],
                                     rel_error_vs_first=errs[n]))
                del q, k, v, o, lse, ref
                if args.backward:
                    del do, dq, dk, dv, g
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema_version": 1, "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "device": torch.cuda.get_device_name(), "torch": torch.__version__, "builds": args.builds,
                       "rows": rows}, f, indent=1)
        print(f"wrote {args.json}")
    for fail in failures:
        print("ERROR: output differs from the first build's:", fail)
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
