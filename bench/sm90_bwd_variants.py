#!/usr/bin/env python3
"""Backward builds of libflashbox against each other and cuDNN, both dQ modes, interleaved, one process.

For the Hopper backward's versions (bench/NOTES.md, "sm90 backward"): every build (non-deterministic),
the builds named with --det (deterministic = 1) and SDPA's cuDNN backend are timed in turn on the
same tensors, ROUNDS times over (triton do_bench median, L2 flushed), and each one's median of rounds
is reported. Gradients are poisoned (NaN) before each build's first call and checked against SDPA's
FlashAttention-2 backend (rel. error < 1e-2); deterministic mode is also run 50 times on one shape per
head_dim and compared bit for bit. --profile T,... adds a per-kernel breakdown (torch.profiler, CUPTI)
of one backward call of every build and of cuDNN.
  python3 bench/sm90_bwd_variants.py old=a/libflashbox.so new=b/libflashbox.so --det new [--json PATH]
      [--rounds 3] [--shapes 64:12:4096:1[:HKV],...]   (head_dim:heads:T:causal[:kv heads])
      [--env NAME:VAR=VALUE ...]
--env sets VAR=VALUE in the environment around every call of build NAME (and unsets it around the
others' calls), so that one library can be timed against itself with a switch that it reads per call
(e.g. lag=b/libflashbox.so --env lag:FLASHBOX_SM90_BWD_DQLAG=1 beside new=b/libflashbox.so).
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

DEFAULT_SHAPES = ",".join([f"64:12:{t}:1" for t in (1024, 2048, 4096, 8192, 16384)] +
                          [f"128:16:{t}:1" for t in (1024, 2048, 4096, 8192, 16384)] +
                          ["128:16:16384:0", "128:32:8192:1:8"])


def profile_one(fn, label):
    """Kernel names and device times (µs) of one call of fn, after a warm-up call."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = getattr(e, "cuda_time_total", 0.0)
        self_t = getattr(e, "self_device_time_total", None)
        if self_t is None:
            self_t = getattr(e, "self_cuda_time_total", t)
        if self_t and self_t > 0:
            rows.append((e.key[:70], float(self_t)))
    total = sum(t for _, t in rows)
    print(f"  profile {label}: {total:8.1f} us in {len(rows)} kernels/copies")
    for name, t in rows:
        print(f"    {t:8.1f} us  {name}")
    return dict(label=label, total_us=total, kernels=rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", metavar="NAME=PATH")
    ap.add_argument("--det", default="", help="comma-separated build names also timed with deterministic = 1")
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--repeat-check", default="64:12:4096:1,128:16:2048:0:4",
                    help="shapes whose deterministic gradients are compared over 50 runs")
    ap.add_argument("--profile", default="", help="seqlens (causal, both head_dims) to break down per kernel")
    ap.add_argument("--no-cudnn", action="store_true", help="time the builds only")
    ap.add_argument("--env", action="append", default=[], metavar="NAME:VAR=VALUE",
                    help="environment of build NAME's calls (repeatable)")
    args = ap.parse_args()
    build_env = {}
    for spec in args.env:
        name, _, kv = spec.partition(":")
        var, _, val = kv.partition("=")
        build_env.setdefault(name, {})[var] = val
    env_vars = {v for e in build_env.values() for v in e}

    def use(name):
        """The environment of build `name` (its --env values, the other builds' variables unset)."""
        for var in env_vars:
            os.environ.pop(var, None)
        os.environ.update(build_env.get(name, {}))
    libs = {}
    for spec in args.builds:
        name, path = spec.split("=", 1)
        libs[name] = cs.load_library(path)
    det_names = [n for n in args.det.split(",") if n]
    variants = [(n, 0) for n in libs] + [(n, 1) for n in det_names]
    label = lambda n, det: n + ("_det" if det else "")
    B, rows, failures, profiles = 4, [], [], []
    repeat_shapes = set(args.repeat_check.split(","))
    profile_ts = {int(x) for x in args.profile.split(",") if x}
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | backward, B{B} bf16, median of "
          f"{args.rounds} rounds of do_bench medians", flush=True)
    for spec in args.shapes.split(","):
        f = [int(x) for x in spec.split(":")]
        D, H, T, causal = f[:4]
        HKV = f[4] if len(f) > 4 else H
        causal = bool(causal)
        torch.cuda.empty_cache()
        gen = torch.Generator(device="cuda").manual_seed(3000 + T + D + HKV)
        q, do = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
        k, v = (torch.randn(B, HKV, T, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
        o = torch.empty_like(q)
        lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        fargs = cs.make_args(q, k, v, o, lse, cs.FLASHBOX_FLASH, causal)
        gqa = HKV != H

        def sdpa_fn(backend):
            def run(a, b, c):
                with cs.sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=causal,
                                                                            enable_gqa=gqa)
            return run
        qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        ref_grads = torch.autograd.grad(sdpa_fn(cs.SDPBackend.FLASH_ATTENTION)(qg, kg, vg), (qg, kg, vg), do)
        cq, ck, cv = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        cudnn_bwd = None
        try:
            if args.no_cudnn:
                raise RuntimeError("not asked for (--no-cudnn)")
            cout = sdpa_fn(cs.SDPBackend.CUDNN_ATTENTION)(cq, ck, cv)
            cudnn_bwd = lambda: torch.autograd.grad(cout, (cq, ck, cv), do, retain_graph=True)
            cudnn_bwd()
        except Exception as e:  # cuDNN may not take a shape (GQA on some versions)
            print(f"  cudnn: {str(e).splitlines()[0][:120]}")
            cudnn_bwd = None
        gargs = {(n, det): cs.grad_args(fargs, do, dq, dk, dv, det) for n, det in variants}
        kernels, errors = {}, {}
        for name, lib in libs.items():  # the forward once per build (O, LSE), then its gradients
            use(name)
            cs.checked(lib, lib.flashbox_attention_forward(ctypes.byref(fargs)))
            for det in (0, 1):
                if (name, det) not in gargs:
                    continue
                for x in (dq, dk, dv):
                    x.fill_(float("nan"))
                cs.checked(lib, lib.flashbox_attention_backward(ctypes.byref(gargs[(name, det)])))
                torch.cuda.synchronize()
                kernels[(name, det)] = lib.flashbox_last_kernel().decode()
                errors[(name, det)] = max(cs.rel_error(m, r) for m, r in zip((dq, dk, dv), ref_grads))
                if det and spec in repeat_shapes:
                    first = [x.clone() for x in (dq, dk, dv)]
                    same = True
                    for _ in range(49):
                        cs.checked(lib, lib.flashbox_attention_backward(ctypes.byref(gargs[(name, det)])))
                        same = same and all(torch.equal(a, b) for a, b in zip(first, (dq, dk, dv)))
                    print(f"  {label(name, det)} {spec}: 50 runs bitwise identical: {same}", flush=True)
                    if not same:
                        failures.append((label(name, det), spec, "not bitwise repeatable"))
        times = {label(n, d): [] for n, d in variants}
        if cudnn_bwd:
            times["cudnn"] = []
        for _ in range(args.rounds):
            for n, det in variants:
                lib, g = libs[n], gargs[(n, det)]
                use(n)
                times[label(n, det)].append(cs.bench(lambda: lib.flashbox_attention_backward(ctypes.byref(g))))
            if cudnn_bwd:
                times["cudnn"].append(cs.bench(cudnn_bwd))
        fl = cs.flops(B, H, T, D, causal, True)
        med = {n: statistics.median(t) for n, t in times.items()}
        tf = {n: fl / (m * 1e-3) / 1e12 for n, m in med.items()}
        first = label(*variants[0])
        print(f"D{D} H{H}/{HKV} T{T} {'causal' if causal else 'full':6s} | " +
              " ".join(f"{n} {tf[n]:6.1f}" for n in tf) + " TFLOP/s | " +
              " ".join(f"{n}/{first} {tf[n] / tf[first]:.3f}" for n in tf if n != first) +
              ("" if "cudnn" not in tf else " | " + " ".join(f"{n}/cudnn {tf[n] / tf['cudnn']:.3f}"
                                                              for n in tf if n != "cudnn")), flush=True)
        for (n, det) in variants:
            err = errors[(n, det)]
            if not err < 1e-2:
                failures.append((label(n, det), spec, err))
        for n in tf:
            key = next(((a, d) for a, d in variants if label(a, d) == n), None)
            rows.append(dict(build=n, head_dim=D, heads=H, heads_kv=HKV, batch=B, seqlen=T, causal=causal,
                             kernel=kernels.get(key, "cudnn"), ms_rounds=times[n], ms=med[n], tflops=tf[n],
                             rel_error_vs_sdpa=errors.get(key)))
        if causal and not gqa and T in profile_ts:
          try:
            for n in libs:  # every build, non-deterministic, then cuDNN
                lib, g = libs[n], gargs[(n, 0)]
                use(n)
                profiles.append(dict(shape=spec, **profile_one(
                    lambda: lib.flashbox_attention_backward(ctypes.byref(g)), f"{n} {spec}")))
            if cudnn_bwd:
                profiles.append(dict(shape=spec, **profile_one(cudnn_bwd, f"cudnn {spec}")))
          except Exception as e:  # the profiler is a diagnosis, not a result
            print(f"  profile failed: {e}")
        del q, k, v, do, o, lse, dq, dk, dv, qg, kg, vg, cq, ck, cv, ref_grads
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows, "profiles": profiles,
                       "failures": [list(map(str, x)) for x in failures]}, fh, indent=1)
    for fail in failures:
        print("ERROR:", fail)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
