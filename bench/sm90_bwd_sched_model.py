#!/usr/bin/env python3
"""List-scheduling model of the Hopper backward's grid (bench/NOTES.md, sm90 backward v8).

CTAs (one per key block and batch x kv head) are dispatched in grid order to the first free SM (one
resident per SM); a CTA lasts OVERHEAD + steps x STEP microseconds, steps = its causal query
blocks. Prints the makespan (µs) of the head-by-head order (9919669), the chunked longest-first
order of v8, and v8's deterministic order (descending key blocks inside a chunk). No GPU needed.
  python3 bench/sm90_bwd_sched_model.py [--overhead 3] [--sms 132] [--gqa]
--gqa (branch gqa, 2026-12-01): instead, B4 T8192 with GQA 32/8 and MHA rows, every chunk size and
the v18 / gqa rules of chunk_heads_for (a CTA walks the group's heads: group x the steps).
"""
import argparse
import heapq
import math

STEP_US = {64: 3.37, 128: 2.83}  # per step and SM, from the T = 16384 rows of 9919669 (406 / 485 TFLOP/s)


def chunk_heads(num_bh, nb, q_pad, d, sms, rule="v18"):  # flash_bwd_sm90.cu, chunk_heads_for
    g = (2 * sms + nb - 1) // nb
    if g <= 3:
        return 1
    g = max(1, min(g, (24 << 20) // (q_pad * d * 4), num_bh))
    if rule == "v18":
        c = (num_bh + g - 1) // g
        return (num_bh + c - 1) // c
    best, best_s = g, -1.0  # gqa: of g .. ceil(g / 2), the fullest last chunk, larger first
    for c in range(g, (g + 1) // 2 - 1, -1):
        r = num_bh % c
        s = 1.0 if r == 0 else r / c
        if s > best_s + 1e-9:
            best, best_s = c, s
    return best


def order_group(T, D, num_bh, G, group):  # the non-deterministic order, a CTA walking `group` heads
    bm, nb = (128 if D == 64 else 64), T // 128
    out = []
    for c0 in range(0, num_bh, G):
        for n in range(nb):
            out += [(T // bm - n * 128 // bm) * group] * min(G, num_bh - c0)
    return out


def gqa_table(overhead, sms):
    print("D   H/Hkv  T     rule(v18) rule(gqa) | makespan (us) per chunk size, efficiency vs ideal")
    for D, H, HK in ((128, 32, 8), (64, 32, 8), (128, 16, 16), (64, 12, 12)):
        T, bh, grp = 8192, 4 * HK, H // HK
        ideal = sum(order_group(T, D, bh, 1, grp)) * STEP_US[D] / sms
        g18, gg = (chunk_heads(bh, T // 128, T, D, sms, r) for r in ("v18", "gqa"))
        cells = []
        for G in sorted({1, 2, 3, 4, 5, 6, 8, g18, gg}):
            ms = makespan(order_group(T, D, bh, G, grp), STEP_US[D], overhead, sms)
            cells.append(f"G{G} {ms:.0f} ({ideal / ms:.3f})")
        print(f"{D:<3d} {H}/{HK:<3d} {T} {g18:9d} {gg:9d} | " + "  ".join(cells))


def order(T, D, num_bh, G, desc):
    bm, nb = (128 if D == 64 else 64), T // 128
    out = []
    for c0 in range(0, num_bh, G):
        for n in (range(nb - 1, -1, -1) if desc else range(nb)):
            out += [T // bm - n * 128 // bm] * min(G, num_bh - c0)
    return out


def add_grid_args(ap):  # the options of the grid both models share (sm90_bwd_det_sched_model.py)
    ap.add_argument("--overhead", type=float, default=3.0, help="µs per CTA (K/V load, fill, dK/dV store)")
    ap.add_argument("--sms", type=int, default=132)


def makespan(steps, step_us, overhead, sms):
    free, end = [0.0] * sms, 0.0
    for s in steps:
        t = heapq.heappop(free) + overhead + s * step_us
        heapq.heappush(free, t)
        end = max(end, t)
    return end


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_grid_args(ap)
    ap.add_argument("--gqa", action="store_true")
    a = ap.parse_args()
    if a.gqa:
        return gqa_table(a.overhead, a.sms)
    print("D   T      chunk  old(us)  v8(us)  v8_det(us)  old/v8  v8/v8_det")
    for D, H in ((64, 12), (128, 16)):
        for T in (1024, 2048, 4096, 8192, 16384):
            bh = 4 * H
            G = chunk_heads(bh, T // 128, T, D, a.sms)
            old = makespan(order(T, D, bh, 1, False), STEP_US[D], a.overhead, a.sms)
            new = makespan(order(T, D, bh, G, False), STEP_US[D], a.overhead, a.sms)
            det = makespan(order(T, D, bh, G, True), STEP_US[D], a.overhead, a.sms)
            print(f"{D:<3d} {T:<6d} {G:5d} {old:8.1f} {new:8.1f} {det:10.1f}  {old / new:6.3f} {new / det:9.3f}")


if __name__ == "__main__":
    main()
