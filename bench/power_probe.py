#!/usr/bin/env python3
"""Sustained clock and power per kernel: is a kernel power-bound on this GPU?

Each kernel runs back to back for --seconds (no L2 flush) while nvidia-smi samples the SM clock and
the board power every 50 ms; printed per kernel: sustained TFLOP/s, median SM clock and power over
the window, and energy per TFLOP. A kernel whose clock sits below the maximum while the power sits
at the limit is power-bound: only less energy per FLOP makes it faster there.
  python3 bench/power_probe.py libflashbox.so [--seconds 3] [--json PATH]
Kernels: bf16 matmul 8192^3 (the dense ceiling), and for D128 H16 B4 T16384 causal / non-causal:
flashbox (defaults, and each FLASHBOX_SM90_* variant given with --variant NAME=K=V[;K=V]) and cuDNN.
"""
import argparse
import csv
import ctypes
import io
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_sdpa as cs  # noqa: E402


def sustained(fn, seconds, flops):
    fn()
    torch.cuda.synchronize()
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        n += 5
    t1 = time.time()
    return t0, t1, flops * n / (t1 - t0) / 1e12


def window(samples, t0, t1):
    inside = [s for s in samples if t0 + 0.5 <= s[0] <= t1]  # skip the ramp
    if not inside:
        return float("nan"), float("nan")
    return statistics.median(s[1] for s in inside), statistics.median(s[2] for s in inside)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("library")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=K=V[;K=V]")
    ap.add_argument("--json")
    args = ap.parse_args()
    lib = cs.load_library(args.library)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    runs = []
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    runs.append(("matmul 8192^3", None) + sustained(lambda: a @ b, args.seconds, 2 * 8192 ** 3))
    del a, b
    variants = {"flashbox": {}}
    for spec in args.variant:
        name, settings = spec.split("=", 1)
        variants[name] = dict(kv.split("=", 1) for kv in settings.split(";"))
    B, H, T, D = 4, 16, 16384, 128
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    o, lse = torch.empty_like(q), torch.empty(B, H, T, device="cuda", dtype=torch.float32)
    for causal in (True, False):
        fl = cs.flops(B, H, T, D, causal, False)
        fargs = cs.make_args(q, k, v, o, lse, cs.FLASHBOX_FLASH, causal)
        for name, settings in variants.items():
            call = cs.forward_call(lib, fargs, cs.options("sm90", settings))
            cs.checked(lib, call())
            kernel = lib.flashbox_last_kernel().decode()
            runs.append((f"{name} {'causal' if causal else 'full'}", kernel) + sustained(call, args.seconds, fl))
        cudnn = cs.sdpa(cs.SDPBackend.CUDNN_ATTENTION, causal)
        runs.append((f"cudnn {'causal' if causal else 'full'}", "cudnn") +
                    sustained(lambda: cudnn(q, k, v), args.seconds, fl))
    time.sleep(0.3)
    smi.terminate()
    out = smi.communicate()[0]
    samples = []
    for row in csv.reader(io.StringIO(out)):
        try:
            ts = time.mktime(time.strptime(row[0].strip().split(".")[0], "%Y/%m/%d %H:%M:%S")) + \
                 float("0." + row[0].strip().split(".")[1])
            samples.append((ts, float(row[1]), float(row[2])))
        except (ValueError, IndexError):
            continue
    rows = []
    print(f"{'kernel':28s} {'TFLOP/s':>8s} {'SM MHz':>7s} {'W':>6s} {'J/PFLOP':>8s}  name")
    for label, kernel, t0, t1, tflops in runs:
        mhz, watts = window(samples, t0, t1)
        jpp = watts / tflops * 1e3  # W / (TFLOP/s) = J/TFLOP; x1e3 = J/PFLOP
        print(f"{label:28s} {tflops:8.0f} {mhz:7.0f} {watts:6.0f} {jpp:8.0f}  {kernel or ''}")
        rows.append(dict(label=label, kernel=kernel, tflops=tflops, sm_mhz=mhz, watts=watts))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "seconds": args.seconds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
