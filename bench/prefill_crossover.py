#!/usr/bin/env python3
"""Where chunked prefill should leave the decode kernels: one kvcache call timed on both routes.

A flashbox_attention_kvcache call with many query rows per KV head can run on the decode kernels
(split-KV, 16-row tiles: the cache is read once per 16 rows) or as chunked prefill (one flash
forward per batch entry on the cache's rows, src/api/kvcache_prefill.cpp). The route is chosen by
rows = seqlen_q x heads_q / heads_kv against a threshold (kPrefillRows, 128), which
FLASHBOX_KVCACHE_PREFILL_ROWS overrides once per process; so this script runs itself twice per
route in child processes (threshold 1: always prefill when it may; 2^20: never) and prints, for each
shape, both times, their ratio and which route the library's threshold takes.

Timing: CUDA events around `--reps` back-to-back calls, median of `--trials`; the calls read the
tables on the host (tables_trusted = False: the prefill route needs the lengths), which both routes
pay. Each child checks its outputs against SDPA (bottom-right causal mask, GQA by repeat) on the same
tensors: relative error below 1e-2, else it exits non-zero.
  python3 bench/prefill_crossover.py [--json out.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_timing import event_ms  # noqa: E402  (imports torch only when it times)

ROUTES = {"decode": str(1 << 20), "prefill": "1"}
THRESHOLD = 128  # kPrefillRows in src/api/kvcache_prefill.hpp


def shapes(quick):
    # (batch, cache keys, heads_q, heads_kv, head_dim, new query tokens)
    out = []
    for b, L in ((1, 32768), (8, 8192)) if quick else ((1, 32768), (1, 131072), (8, 8192), (32, 4096)):
        for sq in (4, 8, 16, 32, 64, 128, 256, 512):
            out.append((b, L, 32, 8, 128, sq))
    return out


def child(route, quick, reps, trials):
    import torch
    import torch.nn.functional as F

    from flashbox import kvcache

    torch.manual_seed(0)
    rows = []
    for b, L, hq, hk, d, sq in shapes(quick):
        g = torch.Generator(device="cuda").manual_seed(1000 + sq)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
        kc = torch.randn(b, L, hk, d, device="cuda", dtype=torch.bfloat16, generator=g)
        vc = torch.randn(b, L, hk, d, device="cuda", dtype=torch.bfloat16, generator=g)
        seqlens = torch.full((b,), L, device="cuda", dtype=torch.int32)

        def call():
            return kvcache.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True)

        out = call()
        # SDPA on the same tensors, query i sees keys [0, L - sq + i] (bottom-right alignment).
        qt = q.transpose(1, 2).float()
        kt = kc.transpose(1, 2).float().repeat_interleave(hq // hk, dim=1)
        vt = vc.transpose(1, 2).float().repeat_interleave(hq // hk, dim=1)
        mask = torch.arange(L, device="cuda")[None, :] <= (L - sq + torch.arange(sq, device="cuda"))[:, None]
        ref = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask).transpose(1, 2)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            print(f"route {route} shape {(b, L, hq, hk, d, sq)}: rel. error {err:.3g} against SDPA", file=sys.stderr)
            sys.exit(3)
        del ref, qt, kt, vt
        times = sorted(ms / reps for ms in event_ms(call, trials, reps))
        rows.append({"batch": b, "keys": L, "heads_q": hq, "heads_kv": hk, "head_dim": d, "seqlen_q": sq,
                     "ms": times[len(times) // 2], "rel_err": err})
    print(json.dumps(rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--route", choices=sorted(ROUTES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.route:
        return child(args.route, args.quick, args.reps, args.trials)
    results = {}
    for route, rows in ROUTES.items():
        env = dict(os.environ, FLASHBOX_KVCACHE_PREFILL_ROWS=rows)
        cmd = [sys.executable, __file__, "--route", route, "--reps", str(args.reps), "--trials", str(args.trials)]
        if args.quick:
            cmd.append("--quick")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            sys.exit(done.returncode)
        results[route] = json.loads(done.stdout.strip().splitlines()[-1])
    table = []
    print(f"{'batch':>5} {'keys':>7} {'sq':>4} {'rows/KV':>7} {'decode ms':>10} {'prefill ms':>10} "
          f"{'prefill/decode':>14}  library takes")
    for dec, pre in zip(results["decode"], results["prefill"]):
        rows = dec["seqlen_q"] * dec["heads_q"] // dec["heads_kv"]
        ratio = pre["ms"] / dec["ms"]
        takes = "prefill" if rows >= THRESHOLD else "decode"
        print(f"{dec['batch']:>5} {dec['keys']:>7} {dec['seqlen_q']:>4} {rows:>7} {dec['ms']:>10.4f} "
              f"{pre['ms']:>10.4f} {ratio:>14.3f}  {takes}")
        table.append({**{k: dec[k] for k in ("batch", "keys", "heads_q", "heads_kv", "head_dim", "seqlen_q")},
                      "rows_per_kv_head": rows, "decode_ms": dec["ms"], "prefill_ms": pre["ms"],
                      "decode_rel_err": dec["rel_err"], "prefill_rel_err": pre["rel_err"], "library_takes": takes})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
