#!/usr/bin/env python3
"""Energy per call under sustained load, read from the board's own energy counter (NVML).

Why: under the H200's 700 W cap the long backward's speed is set by the energy each call takes (the
clock falls until the power fits), so a ratio of times there is a ratio of energies; this measures
the energies directly. For each case and implementation, interleaved over ROUNDS rounds: an idle
pause (the idle power, from the counter), warm-up calls, then back-to-back calls for about SECONDS
between two ticks of the counter (nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded;
it advances in steps, so the window starts on a tick and ends on the first tick after the last
call, and the idle power covers the stretch after the calls finished). Prints J per call, mean W,
ms per call and J per PFLOP; a dense bf16 matmul (8192^3) is the reference for what tensor-core work
alone costs per FLOP.
  python3 bench/energy_per_call.py LIB [--cases 128:16:16384:1,64:12:16384:1] [--rounds 3]
      [--seconds 4] [--json PATH]
Case D:H:T:causal, B4 bf16, the backward (2.5x the forward's FLOPs, as compare_sdpa.py counts).
"""
import argparse
import ctypes
import json
import statistics
import time

import torch
from torch.nn.attention import SDPBackend

import compare_sdpa as cs


class Nvml:
    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.check(self.lib.nvmlInit_v2())
        self.handle = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)))

    def check(self, rc):
        if rc != 0:
            raise RuntimeError(f"NVML call failed with code {rc}")

    def energy_mj(self):
        e = ctypes.c_ulonglong()
        self.check(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(e)))
        return e.value

    def next_tick(self, limit_s=1.0):
        """Waits for the counter to move; returns (time, mJ) at the first reading that differs."""
        start = self.energy_mj()
        t_end = time.perf_counter() + limit_s
        while time.perf_counter() < t_end:
            e = self.energy_mj()
            if e != start:
                return time.perf_counter(), e
        raise RuntimeError("the NVML energy counter did not move within 1 s")


def idle_watts(nvml, seconds=2.0):
    torch.cuda.synchronize()
    t0, e0 = nvml.next_tick()
    time.sleep(seconds)
    t1, e1 = nvml.next_tick()
    return (e1 - e0) / 1e3 / (t1 - t0)


def measure(nvml, fn, seconds, idle_w):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    calls = max(5, int(seconds * 1e3 / s.elapsed_time(e)))
    t0, e0 = nvml.next_tick()
    s.record()
    for _ in range(calls):
        fn()
    e.record()
    torch.cuda.synchronize()
    t_done = time.perf_counter()
    t1, e1 = nvml.next_tick()
    gpu_ms = s.elapsed_time(e)
    # The counter's window is [t0, t1]: the calls, plus the launch gap before the first and the idle
    # stretch after the last (t1 - t_done, at least); take that stretch's idle energy off.
    joules = (e1 - e0) / 1e3 - idle_w * max(0.0, t1 - t_done)
    return dict(calls=calls, ms_per_call=gpu_ms / calls, j_per_call=joules / calls,
                watts=joules / (gpu_ms / 1e3), window_s=t1 - t0)


def backward_pair(lib, D, H, T, causal, B=4):
    gen = torch.Generator(device="cuda").manual_seed(11)
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
    fargs = cs.make_args(q, k, v, o, lse, cs.FLASHBOX_FLASH, causal)
    cs.checked(lib, lib.flashbox_attention_forward(ctypes.byref(fargs)))
    do = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    g = cs.grad_args(fargs, do, dq, dk, dv)
    fb = lambda: cs.checked(lib, lib.flashbox_attention_backward(ctypes.byref(g)))  # noqa: E731
    qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out = cs.sdpa(SDPBackend.CUDNN_ATTENTION, causal)(qg, kg, vg)
    cudnn = lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)  # noqa: E731
    fb()
    ref = cudnn()
    torch.cuda.synchronize()
    errs = [cs.rel_error(x, r) for x, r in zip((dq, dk, dv), ref)]
    keep = (q, k, v, o, lse, do, dq, dk, dv, qg, kg, vg, out, g, fargs)
    return {"flashbox": fb, "cudnn": cudnn}, errs, cs.flops(B, H, T, D, causal, True), keep


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("library")
    ap.add_argument("--cases", default="128:16:16384:1,64:12:16384:1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    nvml = Nvml()
    lib = cs.load_library(a.library)
    print(f"GPU {torch.cuda.get_device_name()}; energy counter {nvml.energy_mj()} mJ", flush=True)
    out = {"cases": []}
    # The reference: a dense bf16 GEMM's energy per FLOP under the same cap.
    n = 8192
    x, y = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    gemm = lambda: torch.matmul(x, y)  # noqa: E731
    idle = idle_watts(nvml)
    r = measure(nvml, gemm, a.seconds, idle)
    r["j_per_pflop"] = r["j_per_call"] / (2 * n ** 3 / 1e15)
    out["gemm_8192"] = dict(r, idle_w=idle)
    print(f"matmul 8192^3: {r['ms_per_call']:.3f} ms, {r['j_per_call']:.3f} J/call, {r['watts']:.0f} W, "
          f"{r['j_per_pflop']:.0f} J/PFLOP (idle {idle:.0f} W)", flush=True)
    del x, y
    for case in a.cases.split(","):
        D, H, T, c = (int(v) for v in case.split(":"))
        fns, errs, flop, keep = backward_pair(lib, D, H, T, bool(c))
        print(f"\nB4 H{H} T{T} D{D} {'causal' if c else 'full'} bf16 backward, {flop / 1e12:.2f} TFLOP a call; "
              f"flashbox dq/dk/dv rel error against cuDNN {', '.join(f'{e:.2e}' for e in errs)}", flush=True)
        rows = {name: [] for name in fns}
        for rnd in range(a.rounds):
            for name, fn in fns.items():
                idle = idle_watts(nvml)
                r = measure(nvml, fn, a.seconds, idle)
                r.update(idle_w=idle, round=rnd, tflops=flop / (r["ms_per_call"] / 1e3) / 1e12,
                         j_per_pflop=r["j_per_call"] / (flop / 1e15))
                rows[name].append(r)
                print(f"  round {rnd} {name:8s} {r['ms_per_call']:8.3f} ms  {r['tflops']:6.1f} TFLOP/s  "
                      f"{r['j_per_call']:7.3f} J/call  {r['watts']:5.0f} W  {r['j_per_pflop']:6.0f} J/PFLOP  "
                      f"({r['calls']} calls, idle {idle:.0f} W)", flush=True)
        med = {name: {k: statistics.median(x[k] for x in v) for k in ("ms_per_call", "j_per_call", "watts")}
               for name, v in rows.items()}
        t_ratio = med["cudnn"]["ms_per_call"] / med["flashbox"]["ms_per_call"]
        e_ratio = med["flashbox"]["j_per_call"] / med["cudnn"]["j_per_call"]
        print(f"  median: cuDNN/flashbox time {t_ratio:.3f}x; flashbox/cuDNN energy per call {e_ratio:.3f}", flush=True)
        out["cases"].append(dict(case=case, rel_errors=errs, tflop=flop / 1e12, rows=rows, median=med,
                                 cudnn_over_flashbox_time=t_ratio, flashbox_over_cudnn_energy=e_ratio))
        del keep, fns
        torch.cuda.empty_cache()
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
