#!/usr/bin/env python3
"""Decode benchmark: flashbox_attention_kvcache against PyTorch SDPA on the same tensors.

For each shape (batch, cache length L, heads_q/heads_kv, head_dim, new tokens = seqlen_q) it times
  flashbox contiguous   the cache as [B, Hkv, L, D] (SDPA's layout, passed by strides: the same tensor)
  flashbox paged        the cache in 16-key pages, shuffled, through a block table
  sdpa_cudnn / sdpa_efficient / sdpa_flash   on the contiguous cache (for the paged run: the gathered
                        contiguous cache), GQA through enable_gqa
and prints GB/s of cache read (K and V bytes of the visible keys; q and o are < 0.1 %) and the
fraction of 4.8 TB/s (the H200's datasheet bandwidth); a device-to-device copy measured in the same
process gives the practical ceiling.

Timing: each variant is captured in a CUDA graph of `--reps` calls (so Python's call cost is not
measured for either side) and replayed; median over `--trials` replays, divided by reps. When the
cache is smaller than 256 MB the calls cycle over several copies, so no call finds its cache in the
50 MB L2. Non-causal (for one token the same thing; for four tokens flashbox's bottom-right causal
mask and SDPA's top-left one differ, and the masked keys are < 0.1 % of the bytes).

  python3 bench/decode_bench.py [--full] [--json out.json] [--splits-sweep]
Needs torch and a CUDA build of libflashbox (FLASHBOX_LIBRARY or build*/libflashbox.so).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from flashbox import kvcache  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_timing import event_ms  # noqa: E402

PEAK_BW = 4.8e12
L2_GUARD = 256 << 20

DEFAULT_SHAPES = [  # (batch, keys, heads_q, heads_kv, head_dim, seqlen_q)
    (1, 131072, 32, 8, 128, 1), (1, 32768, 32, 8, 128, 1), (8, 4096, 32, 8, 128, 1), (8, 16384, 32, 8, 128, 1),
    (32, 4096, 32, 8, 128, 1), (64, 2048, 32, 8, 128, 1), (64, 8192, 32, 8, 128, 1),
    (1, 131072, 32, 8, 128, 4), (8, 8192, 32, 8, 128, 4),
    (1, 131072, 12, 12, 64, 1), (8, 8192, 12, 12, 64, 1), (32, 4096, 12, 12, 64, 1), (64, 2048, 12, 12, 64, 4),
    (8, 8192, 32, 8, 64, 1),
]


QUICK_SHAPES = [  # the bar's shapes and one of each other kind
    (1, 131072, 32, 8, 128, 1), (8, 4096, 32, 8, 128, 1), (8, 16384, 32, 8, 128, 1), (32, 4096, 32, 8, 128, 1),
    (64, 2048, 32, 8, 128, 1), (8, 8192, 32, 8, 128, 4), (8, 8192, 12, 12, 64, 1),
]


def full_shapes():
    out = []
    for hq, hk in ((32, 8), (12, 12)):
        for d in (64, 128):
            for sq in (1, 4):
                for b in (1, 8, 32, 64):
                    for L in (2048, 4096, 8192, 16384, 32768, 131072):
                        if b * L * hk * d * 4 <= 12 << 30:
                            out.append((b, L, hq, hk, d, sq))
    return out


TIMING = {"mode": "graph"}


def graph_time(fns, reps, trials):
    """Median seconds per call of fns (cycled) captured `reps` times in one CUDA graph (eager event
    timing when the capture fails; TIMING says which was used last)."""
    try:
        t = _graph_time(fns, reps, trials)
        TIMING["mode"] = "graph"
        return t
    except RuntimeError as e:
        TIMING["mode"] = "eager (" + str(e).splitlines()[0][:80] + ")"
        torch.cuda.synchronize()
        for f in fns:
            f()

        def cycle():
            for i in range(reps):
                fns[i % len(fns)]()
        times = sorted(ms * 1e-3 / reps for ms in event_ms(cycle, trials))
        return times[len(times) // 2]


def _graph_time(fns, reps, trials):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()  # warm-up outside capture (first-call attribute setting, allocator pools)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            fns[i % len(fns)]()
    g.replay()
    torch.cuda.synchronize()
    times = sorted(ms * 1e-3 / reps for ms in event_ms(g.replay, trials))
    return times[len(times) // 2]


def copy_bandwidth():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = graph_time([lambda: b.copy_(a)], 10, 5)
    return 2 * n / t


def make_case(b, L, hq, hk, d, sq, copies, page=16):
    """Contiguous [B, Hk, L, D] caches (one per copy), a paged copy, q, and the gathered views."""
    dt = torch.bfloat16
    cases = []
    for _ in range(copies):
        k = torch.randn(b, hk, L, d, device="cuda", dtype=dt)
        v = torch.randn(b, hk, L, d, device="cuda", dtype=dt)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
        cases.append((q, k, v))
    pages_per_seq = L // page
    paged = []
    for q, k, v in cases:
        nblk = b * pages_per_seq
        perm = torch.randperm(nblk, device="cuda")
        table = perm.reshape(b, pages_per_seq).to(torch.int32)
        kp = torch.empty(nblk, page, hk, d, device="cuda", dtype=dt)
        vp = torch.empty_like(kp)
        # page table[b, p] holds keys p*page .. of entry b
        kp[table.flatten().long()] = k.permute(0, 2, 1, 3).reshape(b * pages_per_seq, page, hk, d)
        vp[table.flatten().long()] = v.permute(0, 2, 1, 3).reshape(b * pages_per_seq, page, hk, d)
        paged.append((q, kp, vp, table))
    return cases, paged


def flashbox_fns(cases, paged, L, num_splits=0, use_paged=False):
    fns, preps = [], []
    b = cases[0][0].shape[0]
    seqlens = torch.full((b,), L, dtype=torch.int32, device="cuda")
    if use_paged:
        for q, kp, vp, table in paged:
            p = kvcache.prepare_kvcache(q, kp, vp, cache_seqlens=seqlens, block_table=table, num_splits=num_splits,
                                        tables_trusted=True)
            preps.append(p)
    else:
        for q, k, v in cases:
            kc, vc = k.transpose(1, 2), v.transpose(1, 2)  # [B, L, Hk, D] views of the BHSD tensors
            p = kvcache.prepare_kvcache(q, kc, vc, cache_seqlens=seqlens, num_splits=num_splits, tables_trusted=True)
            preps.append(p)
    for p in preps:
        fns.append(p.call)
    return fns, preps


def sdpa_fns(cases, backend, expand=False):
    """SDPA on the cache tensors; GQA through enable_gqa, or (expand) on K/V repeated per query head,
    materialised before timing (4x the bytes for 32/8), for a backend that refuses enable_gqa."""
    fns = []
    for q, k, v in cases:
        qt = q.transpose(1, 2)  # [B, Hq, Sq, D]
        gqa = qt.shape[1] != k.shape[1]
        if expand and gqa:
            k = k.repeat_interleave(qt.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(qt.shape[1] // v.shape[1], dim=1)
            gqa = False

        def f(qt=qt, k=k, v=v, gqa=gqa):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(qt, k, v, enable_gqa=gqa)
        fns.append(f)
    return fns


def check_against_sdpa(prep, q, k, v):
    prep.call()
    ref = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.float(), v.float(),
                                         enable_gqa=q.shape[2] != k.shape[1]).transpose(1, 2)
    torch.cuda.synchronize()
    return float((prep.out.float() - ref).norm() / ref.norm())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="the whole grid (batch 1/8/32/64 x 2k..128k x ...)")
    ap.add_argument("--quick", action="store_true", help="seven shapes: the bar's and one of each other kind")
    ap.add_argument("--json", default="", help="write the rows here")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--splits-sweep", action="store_true", help="time num_splits 1..64 on two shapes")
    ap.add_argument("--no-sdpa", action="store_true", help="flashbox only (variant sweeps)")
    ap.add_argument("--profile", default="", metavar="B,L",
                    help="only run GQA 32/8 D128 at batch B, L keys: warm-up, then one call (for ncu -c 1 -s 2)")
    args = ap.parse_args()

    torch.manual_seed(0)
    if args.profile:
        b, L = (int(x) for x in args.profile.split(","))
        cases, paged = make_case(b, L, 32, 8, 128, 1, 1)
        fns, preps = flashbox_fns(cases, paged, L)
        for _ in range(3):
            fns[0]()
        torch.cuda.synchronize()
        print(f"profiled B{b} L{L}: {preps[0].num_splits()} splits", flush=True)
        return
    dev = torch.cuda.get_device_properties(0)
    copy_bw = copy_bandwidth()
    print(f"device {dev.name}, {dev.multi_processor_count} SMs; torch {torch.__version__}; "
          f"device-to-device copy {copy_bw / 1e12:.2f} TB/s (read + write)")
    shapes = full_shapes() if args.full else QUICK_SHAPES if args.quick else DEFAULT_SHAPES
    backends = [("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("sdpa_flash", SDPBackend.FLASH_ATTENTION)]
    rows = []
    hdr = (f"{'B':>3} {'keys':>7} {'Hq/Hk':>6} {'D':>4} {'Sq':>3} {'splits':>6} | {'fb GB/s':>8} {'%4.8':>5} "
           f"{'paged':>8} {'%4.8':>5} | {'cudnn':>8} {'effic':>8} {'flash':>8} | {'x best':>6} {'x paged':>7} {'err':>8}")
    print(hdr)
    for (b, L, hq, hk, d, sq) in shapes:
        cache_bytes = b * L * hk * d * 2 * 2
        copies = max(1, min(8, math.ceil(L2_GUARD / cache_bytes)))
        cases, paged = make_case(b, L, hq, hk, d, sq, copies)
        row = dict(batch=b, keys=L, heads_q=hq, heads_kv=hk, head_dim=d, seqlen_q=sq, cache_bytes=cache_bytes,
                   copies=copies)
        fns, preps = flashbox_fns(cases, paged, L)
        row["splits"] = preps[0].num_splits()
        row["rel_err_vs_sdpa_fp32"] = check_against_sdpa(preps[0], *cases[0])
        row["flashbox_s"] = graph_time(fns, args.reps, args.trials)
        pfns, ppreps = flashbox_fns(cases, paged, L, use_paged=True)
        row["rel_err_paged"] = check_against_sdpa(ppreps[0], *cases[0])
        row["flashbox_paged_s"] = graph_time(pfns, args.reps, args.trials)
        row["timing"] = TIMING["mode"]
        for name, be in ([] if args.no_sdpa else backends):
            try:
                row[name + "_s"] = graph_time(sdpa_fns(cases, be), args.reps, args.trials)
            except Exception as e:  # a backend that does not take this shape: try K/V expanded
                row[name + "_error"] = str(e).splitlines()[0][:200]
                try:
                    row[name + "_s"] = graph_time(sdpa_fns(cases, be, expand=True), args.reps, args.trials)
                    row[name + "_expanded"] = True
                except Exception as e2:
                    row[name + "_s"] = None
                    row[name + "_error"] += " | expanded: " + str(e2).splitlines()[0][:200]
        sd = [row[n + "_s"] for n, _ in backends if row.get(n + "_s")]
        best = min(sd) if sd else float("nan")
        gbs = lambda t: cache_bytes / t / 1e9 if t else float("nan")  # noqa: E731
        row["flashbox_GBps"], row["flashbox_paged_GBps"] = gbs(row["flashbox_s"]), gbs(row["flashbox_paged_s"])
        row["speedup_vs_best_sdpa"] = best / row["flashbox_s"]
        row["paged_speedup_vs_best_sdpa"] = best / row["flashbox_paged_s"]
        rows.append(row)
        f = lambda n: f"{gbs(row[n + '_s']):8.0f}" if row.get(n + "_s") else f"{'-':>8}"  # noqa: E731
        print(f"{b:>3} {L:>7} {hq:>3}/{hk:<2} {d:>4} {sq:>3} {row['splits']:>6} | {row['flashbox_GBps']:8.0f} "
              f"{row['flashbox_GBps'] * 1e9 / PEAK_BW * 100:5.1f} {row['flashbox_paged_GBps']:8.0f} "
              f"{row['flashbox_paged_GBps'] * 1e9 / PEAK_BW * 100:5.1f} | {f('sdpa_cudnn')} {f('sdpa_efficient')} "
              f"{f('sdpa_flash')} | {row['speedup_vs_best_sdpa']:6.2f} {row['paged_speedup_vs_best_sdpa']:7.2f} "
              f"{max(row['rel_err_vs_sdpa_fp32'], row['rel_err_paged']):8.1e}", flush=True)
        del cases, paged, fns, preps, pfns, ppreps
        torch.cuda.empty_cache()
    sweep = []
    if args.splits_sweep:
        print("split sweep (model's choice marked *):")
        for (b, L, hq, hk, d, sq) in [(1, 131072, 32, 8, 128, 1), (8, 4096, 32, 8, 128, 1)]:
            cache_bytes = b * L * hk * d * 4
            copies = max(1, min(8, math.ceil(L2_GUARD / cache_bytes)))
            cases, paged = make_case(b, L, hq, hk, d, sq, copies)
            chosen = flashbox_fns(cases, paged, L)[1][0].num_splits()
            line = []
            for s in (1, 2, 3, 4, 8, 16, 24, 33, 64):
                t = graph_time(flashbox_fns(cases, paged, L, num_splits=s)[0], args.reps, args.trials)
                sweep.append(dict(batch=b, keys=L, splits=s, seconds=t, GBps=cache_bytes / t / 1e9, chosen=chosen))
                line.append(f"{s}{'*' if s == chosen else ''}:{cache_bytes / t / 1e9:.0f}")
            print(f"  B{b} L{L} (chosen {chosen}): " + " ".join(line), flush=True)
            del cases, paged
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(device=dev.name, sms=dev.multi_processor_count, torch=torch.__version__,
                           copy_bandwidth_Bps=copy_bw, peak_bandwidth_Bps=PEAK_BW, rows=rows, split_sweep=sweep,
                           date=time.strftime("%Y-%m-%d")), fh, indent=1)


if __name__ == "__main__":
    main()
