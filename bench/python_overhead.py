#!/usr/bin/env python3
"""What calling flashbox through the Python package costs over calling the C API directly.

Three ways to run the same forward (B4 H12 D64 T4096 bf16 causal by default, the source's experiment):
  raw ctypes   flashbox_attention_forward(&args) with args, o and lse built once (the floor)
  attention    flashbox.attention(q, k, v, causal=True): the torch custom op (allocates o and lse,
               fills the struct, autograd wrapper, dispatcher)
  flash_attn   flashbox.flash_attn_func(q, k, v, causal=True): the FlashAttention-2 signature on top
Each is timed over back-to-back calls (per call = wall time of N calls ending in a synchronize, the
median of the repeats; the GPU time from CUDA events is printed too) and for its host time alone (the
Python time to issue the N calls). Bar: the package's per-call time within 5 % of the raw call.

  python3 bench/python_overhead.py [--seqlen 4096] [--json bench/results/python_overhead.json]
"""

import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

import flashbox  # noqa: E402
from flashbox import _lib  # noqa: E402

BAR_PERCENT = 5.0


def raw_call(q, k, v, causal):
    """A closure that makes exactly one C API call, everything else prepared up front."""
    B, T, H, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)
    a = _lib.AttentionArgs()
    a.device = _lib.Device.CUDA if q.is_cuda else _lib.Device.CPU
    a.dtype = {torch.float32: _lib.DType.FLOAT32, torch.float16: _lib.DType.FLOAT16,
               torch.bfloat16: _lib.DType.BFLOAT16}[q.dtype]
    a.impl = _lib.Impl.AUTO
    a.batch, a.seqlen_q, a.seqlen_k, a.heads_q, a.heads_kv, a.head_dim = B, T, T, H, H, D
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    for name in ("q_stride", "k_stride", "v_stride", "o_stride"):
        getattr(a, name)[:] = (T * H * D, H * D, D)
    a.causal = int(causal)
    a.stream = torch.cuda.current_stream().cuda_stream if q.is_cuda else None
    fn, ref = _lib.library().flashbox_attention_forward, ctypes.byref(a)
    _lib.check(fn(ref))

    def call():
        if fn(ref):
            _lib.check(1)
    call.keep = (o, lse, a)
    return call


def time_variant(call, iters, device):
    """(wall seconds per call, host seconds per call, GPU seconds per call or None)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    t_host = time.perf_counter() - t0
    if device == "cuda":
        end.record()
    sync()
    t_wall = time.perf_counter() - t0
    gpu = start.elapsed_time(end) / 1e3 / iters if device == "cuda" else None
    return t_wall / iters, t_host / iters, gpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--seqlen", type=int, default=None, help="default 4096 on CUDA, 256 on CPU")
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None)
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--iters", type=int, default=None, help="calls per timing (default 50 CUDA, 5 CPU)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    cuda = args.device == "cuda"
    T = args.seqlen or (4096 if cuda else 256)
    iters = args.iters or (50 if cuda else 5)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
        args.dtype or ("bf16" if cuda else "fp32")]
    causal = not args.no_causal
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(args.batch, T, args.heads, args.head_dim, generator=g).to(args.device, dtype)
               for _ in range(3))

    variants = {
        "raw ctypes": raw_call(q, k, v, causal),
        "attention": lambda: flashbox.attention(q, k, v, causal=causal),
        "flash_attn": lambda: flashbox.flash_attn_func(q, k, v, causal=causal),
    }
    for call in variants.values():     # warm up: first-call costs (op registration, allocator, kernels)
        for _ in range(3):
            call()
    samples = {name: [] for name in variants}
    for r in range(args.repeats):      # interleaved, rotating the order, so drift hits every variant alike
        names = list(variants)
        names = names[r % len(names):] + names[:r % len(names)]
        for name in names:
            samples[name].append(time_variant(variants[name], iters, args.device))

    def med(name, i):
        xs = [s[i] for s in samples[name] if s[i] is not None]
        return statistics.median(xs) if xs else None

    base = med("raw ctypes", 0)
    base_host = med("raw ctypes", 1)
    print(f"flashbox {flashbox.version()} ({flashbox.library_path()}); torch {torch.__version__}; "
          f"{torch.cuda.get_device_name() if cuda else platform.processor() or 'cpu'}")
    print(f"forward B{args.batch} H{args.heads} D{args.head_dim} T{T} {str(dtype)[6:]} "
          f"{'causal' if causal else 'full'} on {args.device}; median of {args.repeats} x {iters} calls\n")
    print(f"{'variant':12s} {'per call':>11s} {'GPU':>11s} {'host':>10s} {'vs raw':>9s}")
    rows = []
    for name in variants:
        wall, host, gpu = med(name, 0), med(name, 1), med(name, 2)
        over = (wall - base) / base * 100.0
        rows.append({"variant": name, "seconds_per_call": wall, "host_seconds_per_call": host,
                     "gpu_seconds_per_call": gpu, "overhead_percent": over,
                     "host_overhead_us": (host - base_host) * 1e6})
        gpu_s = f"{gpu * 1e3:8.3f} ms" if gpu is not None else f"{'-':>11s}"
        print(f"{name:12s} {wall * 1e3:8.3f} ms {gpu_s} {host * 1e6:7.1f} us {over:+8.2f} %")
    worst = max(r["overhead_percent"] for r in rows)
    met = worst < BAR_PERCENT
    print(f"\nhost cost of the package over the raw call: "
          f"{rows[1]['host_overhead_us']:.1f} us (attention), {rows[2]['host_overhead_us']:.1f} us (flash_attn)")
    print(f"bar: package within {BAR_PERCENT:.0f} % of the raw call: {'met' if met else 'NOT met'} "
          f"(worst {worst:+.2f} %)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"shape": {"batch": args.batch, "heads": args.heads, "head_dim": args.head_dim,
                                 "seqlen": T, "dtype": str(dtype), "causal": causal},
                       "device": torch.cuda.get_device_name() if cuda else "cpu",
                       "torch": torch.__version__, "flashbox": flashbox.version(), "iters": iters,
                       "repeats": args.repeats, "bar_percent": BAR_PERCENT, "bar_met": met, "rows": rows},
                      fh, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
