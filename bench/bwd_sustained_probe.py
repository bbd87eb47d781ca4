#!/usr/bin/env python3
"""Whether a long backward's time under sustained load is its time alone (power cap, clocks).

One shape (default B4 H16 T16384 D128 causal, bf16), flashbox (C API through ctypes, as compare_sdpa.py)
and cuDNN (SDPA's backend, autograd on the same tensors): after an idle pause, one call timed alone
with CUDA events, then N calls back to back, each between events, while nvidia-smi samples the SM clock
and the power draw every 50 ms; then do_bench as compare_sdpa.py times it. Prints per impl: the alone
time, the first and last calls of the loop, the loop's median, do_bench's median, and the clock and
power over the loop.
  python3 bench/bwd_sustained_probe.py LIB [--shape D:H:T:causal] [--calls 40] [--json PATH]
"""
import argparse
import ctypes
import json
import statistics
import subprocess
import time

import torch
import triton
from torch.nn.attention import SDPBackend

import compare_sdpa as cs


REASONS = ["clocks_event_reasons.sw_power_cap", "clocks_event_reasons.hw_slowdown",
           "clocks_event_reasons.hw_power_brake_slowdown", "clocks_event_reasons.sw_thermal_slowdown",
           "clocks_event_reasons.hw_thermal_slowdown", "temperature.gpu"]


def timed(fn):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    return s, e


def probe(name, fn, calls):
    torch.cuda.synchronize()
    time.sleep(3.0)  # idle: the clocks come back up
    s, e = timed(fn)
    torch.cuda.synchronize()
    alone = s.elapsed_time(e)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw," + ",".join(REASONS),
                            "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    evs = [timed(fn) for _ in range(calls)]
    torch.cuda.synchronize()
    smi.terminate()
    lines = [[x.strip() for x in line.split(",")] for line in smi.communicate()[0].splitlines() if "," in line]
    samples = [(float(f[0]), float(f[1])) for f in lines if len(f) >= 2 + len(REASONS)]
    # How many samples had each clock event reason active (the driver's own account of the slowdown).
    active = {r: sum(f[2 + i] == "Active" for f in lines if len(f) >= 2 + len(REASONS)) for i, r in enumerate(REASONS)}
    loop = [s.elapsed_time(e) for s, e in evs]
    bench = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    clocks = [c for c, _ in samples]
    power = [p for _, p in samples]
    r = dict(impl=name, alone_ms=alone, first_ms=loop[:3], last_ms=loop[-3:], loop_median_ms=statistics.median(loop),
             do_bench_ms=bench, clock_mhz=[min(clocks), statistics.median(clocks), max(clocks)] if clocks else None,
             power_w=[min(power), statistics.median(power), max(power)] if power else None, samples=len(samples),
             reasons_active=active, temperature_c=[float(f[-1]) for f in lines if len(f) >= 2 + len(REASONS)][-1:])
    print(f"{name:9s} alone {alone:7.3f} ms | loop first {loop[0]:7.3f} {loop[1]:7.3f} {loop[2]:7.3f} last "
          f"{loop[-1]:7.3f} median {r['loop_median_ms']:7.3f} | do_bench {bench:7.3f} | SM clock min/med/max "
          f"{r['clock_mhz']} MHz, power {r['power_w']} W ({len(samples)} samples)\n          active: " +
          ", ".join(f"{k.split('.')[-1]} {v}" for k, v in active.items() if v) + f"; last temperature {r['temperature_c']} C",
          flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("library")
    ap.add_argument("--shape", default="128:16:16384:1")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--json")
    a = ap.parse_args()
    D, H, T, c = (int(x) for x in a.shape.split(":"))
    causal = bool(c)
    B = 4
    lib = cs.load_library(a.library)
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
    fargs = cs.make_args(q, k, v, o, lse, cs.FLASHBOX_FLASH, causal)
    cs.checked(lib, lib.flashbox_attention_forward(ctypes.byref(fargs)))
    do = torch.randn_like(q)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    g = cs.grad_args(fargs, do, dq, dk, dv)
    fb = lambda: cs.checked(lib, lib.flashbox_attention_backward(ctypes.byref(g)))  # noqa: E731
    fb()
    qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out = cs.sdpa(SDPBackend.CUDNN_ATTENTION, causal)(qg, kg, vg)
    cudnn = lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)  # noqa: E731
    cudnn()
    print(f"B{B} H{H} T{T} D{D} {'causal' if causal else 'full'} bf16 backward; {a.calls} calls back to back")
    rows = [probe("flashbox", fb, a.calls), probe("cudnn", cudnn, a.calls), probe("flashbox", fb, a.calls)]
    if a.json:
        json.dump({"shape": a.shape, "rows": rows}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
