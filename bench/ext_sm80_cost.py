#!/usr/bin/env python3
"""What the extension's fields cost in the sm80 kernels, forward and backward, on one GPU.

Every row runs flashbox.flash_attn with the sm80 families pinned (FLASHBOX_FLASH_ARCH=sm80,
FLASHBOX_BWD_ARCH=sm80, set here before the library loads) and reports TFLOP/s counted over the
(query, key) pairs the mask leaves visible (4·D per pair forward, 10·D backward: 2.5x), so a window
and the plain causal call compare at the same work:
  plain causal | softcap | ALiBi | softcap + ALiBi | window (left W, causal) | head_dim 96 (on d128)
and one variable-length batch of mixed lengths against the sum of its sequences' fixed-length calls
(the padding-free ideal). Timing: CUDA events around 8 back-to-back calls, median of --reps after a warm-up.
  python3 bench/ext_sm80_cost.py [--seqlen 4096] [--heads 16] [--head-dim 128] [--json out.json]
"""
import argparse
import itertools
import json
import os
import statistics
import sys

os.environ.setdefault("FLASHBOX_FLASH_ARCH", "sm80")
os.environ.setdefault("FLASHBOX_BWD_ARCH", "sm80")

import torch  # noqa: E402

from flashbox import flash_attn as fa  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_timing import event_ms  # noqa: E402


def timed(fn, reps, calls=8):
    """Median over `reps` of the mean time of `calls` back-to-back calls (the queue stays full, so the
    Python cost of a call hides behind the previous kernel as it does in a model)."""
    fn()
    torch.cuda.synchronize()
    return statistics.median([ms * 1e-3 / calls for ms in event_ms(fn, reps, calls)])


def visible_pairs(tq, tk, causal, left):
    i = torch.arange(tq).view(-1, 1) + tk - tq
    j = torch.arange(tk).view(1, -1)
    m = torch.ones(tq, tk, dtype=torch.bool)
    if causal:
        m &= j <= i
    if left >= 0:
        m &= j >= i - left
    return int(m.sum())


def run_fixed(B, T, H, D, reps, causal=True, softcap=0.0, alibi=False, left=-1):
    q, k, v = (torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    slopes = torch.rand(H, device="cuda") * 0.3 if alibi else None
    kw = dict(causal=causal, softcap=softcap, alibi_slopes=slopes, window_size=(left, -1))
    out = fa.flash_attn_func(q, k, v, **kw)
    g = torch.randn_like(out)
    fwd = timed(lambda: fa.flash_attn_func(q, k, v, **kw), reps)
    fb = timed(lambda: torch.autograd.grad(fa.flash_attn_func(q, k, v, **kw), (q, k, v), g), reps)
    pairs = B * H * visible_pairs(T, T, causal, left)
    return {"fwd_s": fwd, "bwd_s": fb - fwd, "fwd_tflops": 4 * D * pairs / fwd / 1e12,
            "bwd_tflops": 10 * D * pairs / (fb - fwd) / 1e12}


def run_varlen(lens, H, D, reps):
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device="cuda")
    total = int(cu[-1])
    q, k, v = (torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mx = max(lens)
    out = fa.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True)
    g = torch.randn_like(out)
    packed_f = timed(lambda: fa.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True), reps)
    packed_fb = timed(lambda: torch.autograd.grad(fa.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True),
                                                  (q, k, v), g), reps)
    ideal_f = ideal_fb = 0.0
    for s, n in enumerate(lens):
        a, b = int(cu[s]), int(cu[s + 1])
        qs, ks, vs = (t.detach()[a:b].unsqueeze(0).requires_grad_() for t in (q, k, v))
        gs = g[a:b].unsqueeze(0)
        ideal_f += timed(lambda: fa.flash_attn_func(qs, ks, vs, causal=True), reps)
        ideal_fb += timed(lambda: torch.autograd.grad(fa.flash_attn_func(qs, ks, vs, causal=True), (qs, ks, vs), gs),
                          reps)
    return {"lens": lens, "varlen_fwd_s": packed_f, "ideal_fwd_s": ideal_f, "fwd_ratio": packed_f / ideal_f,
            "varlen_fwd_bwd_s": packed_fb, "ideal_fwd_bwd_s": ideal_fb, "fwd_bwd_ratio": packed_fb / ideal_fb}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.manual_seed(0)
    B, T, H, D = a.batch, a.seqlen, a.heads, a.head_dim
    rows = {}
    configs = [("plain causal", {}), ("softcap 30", {"softcap": 30.0}), ("alibi", {"alibi": True}),
               ("softcap+alibi", {"softcap": 30.0, "alibi": True}), (f"window {a.window} causal", {"left": a.window})]
    print(f"sm80, bf16, B{B} T{T} H{H} D{D}; TFLOP/s over visible pairs")
    for name, kw in configs:
        r = run_fixed(B, T, H, D, a.reps, **kw)
        rows[name] = r
        print(f"  {name:24s} fwd {r['fwd_tflops']:7.1f}   bwd {r['bwd_tflops']:7.1f}")
    r = run_fixed(B, T, H, 96, a.reps)
    rows["plain causal d96"] = r
    print(f"  {'plain causal d96':24s} fwd {r['fwd_tflops']:7.1f}   bwd {r['bwd_tflops']:7.1f}  (counted at d96)")
    v = run_varlen([4096, 2048, 1024, 512, 3000, 1234, 128, 1], H, D, a.reps)
    rows["varlen"] = v
    print(f"  varlen {v['lens']}: fwd {v['fwd_ratio']:.3f}x, fwd+bwd {v['fwd_bwd_ratio']:.3f}x the per-sequence sum")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "shape": [B, T, H, D], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
