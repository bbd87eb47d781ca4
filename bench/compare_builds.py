#!/usr/bin/env python3
"""Two (or more) builds of libflashbox against each other and cuDNN, forward and backward, interleaved.

For a change that should not move the numbers (a refactor): every build and cuDNN are timed in turn
on the same tensors, ROUNDS times over (triton do_bench median each), and each one's median of rounds
is reported, so clock or power drift during the run hits all of them alike. Each build's output and
gradients are checked against SDPA's FlashAttention-2 backend (rel. error < 1e-2).
  python3 bench/compare_builds.py NAME=libflashbox.so NAME=other/libflashbox.so [--json PATH]
      [--rounds 3] [--shapes 64:12:4096:1,...]   (head_dim:heads:T:causal)
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_sdpa as cs  # noqa: E402

DEFAULT_SHAPES = ("64:12:1024:1,64:12:4096:1,64:12:16384:1,128:16:1024:1,128:16:4096:1,128:16:16384:1,"
                  "128:16:16384:0")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", metavar="NAME=PATH")
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    args = ap.parse_args()
    libs = {}
    for spec in args.builds:
        name, path = spec.split("=", 1)
        libs[name] = cs.load_library(path)
    B, rows, failures = 4, [], []
    for spec in args.shapes.split(","):
        D, H, T, causal = (int(x) for x in spec.split(":"))
        causal = bool(causal)
        torch.cuda.empty_cache()
        gen = torch.Generator(device="cuda").manual_seed(2000 + T + D)
        q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        fargs = cs.make_args(q, k, v, o, lse, cs.FLASHBOX_FLASH, causal)
        g = cs.grad_args(fargs, do, dq, dk, dv)
        qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        ref = cs.sdpa(cs.SDPBackend.FLASH_ATTENTION, causal)(qg, kg, vg)
        ref_grads = torch.autograd.grad(ref, (qg, kg, vg), do)
        ref = ref.detach()
        cudnn = cs.sdpa(cs.SDPBackend.CUDNN_ATTENTION, causal)
        cq, ck, cv = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        cout = cudnn(cq, ck, cv)
        cudnn_bwd = lambda: torch.autograd.grad(cout, (cq, ck, cv), do, retain_graph=True)
        times = {(n, d): [] for n in list(libs) + ["cudnn"] for d in ("forward", "backward")}
        kernels, errors = {}, {}
        for name, lib in libs.items():  # correctness once per build, before timing
            o.fill_(float("nan"))
            cs.checked(lib, lib.flashbox_attention_forward(ctypes.byref(fargs)))
            torch.cuda.synchronize()
            kernels[(name, "forward")] = lib.flashbox_last_kernel().decode()
            errors[(name, "forward")] = cs.rel_error(o, ref)
            for x in (dq, dk, dv):
                x.fill_(float("nan"))
            cs.checked(lib, lib.flashbox_attention_backward(ctypes.byref(g)))
            torch.cuda.synchronize()
            kernels[(name, "backward")] = lib.flashbox_last_kernel().decode()
            errors[(name, "backward")] = max(cs.rel_error(m, r) for m, r in zip((dq, dk, dv), ref_grads))
        for _ in range(args.rounds):
            for name, lib in libs.items():
                times[(name, "forward")].append(cs.bench(lambda: lib.flashbox_attention_forward(ctypes.byref(fargs))))
                times[(name, "backward")].append(cs.bench(lambda: lib.flashbox_attention_backward(ctypes.byref(g))))
            times[("cudnn", "forward")].append(cs.bench(lambda: cudnn(q, k, v)))
            times[("cudnn", "backward")].append(cs.bench(cudnn_bwd))
        for direction in ("forward", "backward"):
            fl = cs.flops(B, H, T, D, causal, direction == "backward")
            med = {n: statistics.median(times[(n, direction)]) for n in list(libs) + ["cudnn"]}
            tf = {n: fl / (m * 1e-3) / 1e12 for n, m in med.items()}
            first = next(iter(libs))
            print(f"D{D} H{H} T{T} {'causal' if causal else 'full'} {direction:8s} | " +
                  " ".join(f"{n} {tf[n]:6.1f}" for n in tf) + " TFLOP/s | " +
                  " ".join(f"{n}/{first} {tf[n] / tf[first]:.3f}" for n in libs if n != first), flush=True)
            for n in tf:
                err = errors.get((n, direction))
                if err is not None and not err < 1e-2:
                    failures.append((n, D, T, causal, direction, err))
                rows.append(dict(build=n, head_dim=D, heads=H, batch=B, seqlen=T, causal=causal, direction=direction,
                                 kernel=kernels.get((n, direction), "cudnn"), ms_rounds=times[(n, direction)],
                                 ms=med[n], tflops=tf[n], rel_error_vs_sdpa=err))
        del q, k, v, do, o, lse, dq, dk, dv, qg, kg, vg, cq, ck, cv, cout, ref, ref_grads
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    for fail in failures:
        print("ERROR: relative error too large:", fail)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
