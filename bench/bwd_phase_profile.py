#!/usr/bin/env python3
"""Where a backward call's time goes, kernel by kernel: a windowed call against its same-work plain
peer (compare_masks.py's T', a causal triangle or square with as many visible pairs) and the plain
call at the same T. Each case runs one forward_ext, warm-up backward calls, then N backward calls under
torch.profiler (CUPTI sees every kernel in the process, flashbox's included); per kernel name, the
average device time per call, beside the call's time from CUDA events (kernels that overlap under
programmatic launch count once in the call time, fully in their own rows).

  python3 bench/bwd_phase_profile.py build/libflashbox.so [--configs 128:16,64:12] [--seqlen 16384]
      [--window 1024] [--calls 5] [--json out.json]
  --no-profiler --only window,same_work --causal-only: the call times alone, for a run under Nsight
  Compute (ncu and torch.profiler both need CUPTI)
"""
import argparse
import ctypes
import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_masks import Ext, ext, same_work_seqlen, visible_pairs  # noqa: E402
from compare_sdpa import grad_args  # noqa: E402
from compare_sdpa import FLASHBOX_FLASH, AttentionArgs, GradArgs, checked, load_library, make_args  # noqa: E402


def case(lib, B, H, T, D, causal, window, calls, seed, profiler=True):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    o, dq, dk, dv = (torch.empty_like(q) for _ in range(4))
    lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
    a = make_args(q, k, v, o, lse, FLASHBOX_FLASH, causal)
    e = ext(window)
    checked(lib, lib.flashbox_attention_forward_ext(ctypes.byref(a), ctypes.byref(e)))
    g = grad_args(a, do, dq, dk, dv)
    call = lambda: checked(lib, lib.flashbox_attention_backward_ext(ctypes.byref(g), ctypes.byref(e)))  # noqa: E731
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    torch.cuda.synchronize()
    call_us = start.elapsed_time(end) * 1e3 / calls
    kernels = {}
    if profiler:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                call()
            torch.cuda.synchronize()
        for ev in prof.key_averages():
            t = getattr(ev, "device_time_total", None)
            if t is None:
                t = ev.cuda_time_total
            if t > 0:
                kernels[ev.key[:90]] = t / calls
    pairs = visible_pairs(T, causal, window)
    tflops = 2.5 * 4.0 * B * H * D * pairs / (call_us * 1e-6) / 1e12
    return dict(head_dim=D, heads=H, batch=B, seqlen=T, causal=causal, window=list(window), call_us=call_us,
                tflops=tflops, kernel=lib.flashbox_last_kernel().decode(), kernels_us=kernels)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("library", nargs="?")
    ap.add_argument("--configs", default="128:16,64:12")
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--no-profiler", action="store_true")
    ap.add_argument("--only", help="comma-separated cases: window, same_work, plain")
    ap.add_argument("--causal-only", action="store_true")
    args = ap.parse_args()
    lib = load_library(args.library)
    lib.flashbox_attention_forward_ext.argtypes = [ctypes.POINTER(AttentionArgs), ctypes.POINTER(Ext)]
    lib.flashbox_attention_backward_ext.argtypes = [ctypes.POINTER(GradArgs), ctypes.POINTER(Ext)]
    T, W, B = args.seqlen, args.window, args.batch
    rows = []
    for cfg in args.configs.split(","):
        D, H = (int(x) for x in cfg.split(":"))
        for causal, window in ((True, (W, -1)),) + (() if args.causal_only else ((False, (W, W)),)):
            t2 = same_work_seqlen(T, causal, window)
            for what, t, win in (("window", T, window), ("same_work", t2, (-1, -1)), ("plain", T, (-1, -1))):
                if args.only and what not in args.only.split(","):
                    continue
                seed = 3000 + t + D
                print(f"seed {seed}", flush=True)
                r = case(lib, B, H, t, D, causal, win, args.calls, seed, not args.no_profiler)
                r["what"] = what
                rows.append(r)
                print(f"D{D} H{H} T{t} {'causal' if causal else 'full'} {what:9s} window {list(win)}: "
                      f"{r['call_us']:9.1f} us/call {r['tflops']:6.1f} TFLOP/s ({r['kernel']})", flush=True)
                for name, us in sorted(r["kernels_us"].items(), key=lambda kv: -kv[1]):
                    print(f"    {us:9.1f} us  {us / r['call_us']:6.3f}  {name}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
