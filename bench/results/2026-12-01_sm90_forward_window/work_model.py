#!/usr/bin/env python3
"""Work model of the sm90 forward's tiles under a sliding window (bench/NOTES.md, sm90 forward v11).

For a [T, T] call (FA2 window semantics, bottom-right aligned; causal = right edge 0) and a tile
BM x BN: the K/V blocks each tile's walk visits (block_range in flash_fwd_sm90_kernel.cuh), how many
of them are masked, and the pairs the tile computes (blocks x BM x BN) against the visible pairs.
The second table: the same with each 64-row consumer warpgroup walking only its own blocks
(group_range, v11 change 1). The TFLOP/s column is v7's run 2 (bench/results/2026-12-01_sm90_forward_masks),
re-read over the computed pairs.  python3 work_model.py
"""


def edges(T, left, right):
    def begin(i):
        return 0 if left < 0 else min(max(i - left, 0), T)

    def end(i):
        return T if right < 0 else min(max(i + right + 1, 0), T)
    return begin, end


def visible(T, left, right):
    b, e = edges(T, left, right)
    return sum(max(e(i) - b(i), 0) for i in range(T))


def tiles(T, BM, BN, left, right):
    b, e = edges(T, left, right)
    comp = ntiles = blocks = masked = 0
    for m in range((T + BM - 1) // BM):
        rf, rl = m * BM, min(m * BM + BM, T) - 1
        if e(rl) <= b(rf):
            continue
        nb, ne = b(rf) // BN, (e(rl) + BN - 1) // BN
        fb, fe = (b(rl) + BN - 1) // BN, e(rf) // BN
        ntiles, blocks = ntiles + 1, blocks + ne - nb
        masked += sum(1 for n in range(nb, ne) if n < fb or n >= fe)
        comp += (ne - nb) * BN * BM
    return comp, ntiles, blocks, masked


def per_group(T, BM, BN, left, right):
    b, e = edges(T, left, right)
    comp = 0
    for f in range(0, T, 64):
        la = min(f + 63, T - 1)
        if e(la) > b(f):
            comp += ((e(la) + BN - 1) // BN - b(f) // BN) * BN * 64
    return comp


ROWS = [  # name, T, BM, BN, left, right, v7 run 2 TFLOP/s over visible pairs
    ("D128 causal W1024", 16384, 128, 128, 1024, 0, 514), ("D128 2side W1024", 16384, 128, 128, 1024, 1024, 563),
    ("D128 plain causal 16k", 16384, 128, 128, -1, 0, 690), ("D128 plain full 16k", 16384, 128, 128, -1, -1, 699),
    ("D128 plain causal 5696", 5696, 128, 128, -1, 0, 559), ("D128 plain full 5696", 5696, 128, 128, -1, -1, 670),
    ("D128 causal W4096", 16384, 128, 128, 4096, 0, 634), ("D128 2side W4096", 16384, 128, 128, 4096, 4096, 670),
    ("D64 causal W1024", 16384, 192, 128, 1024, 0, 374), ("D64 2side W1024", 16384, 192, 128, 1024, 1024, 455),
    ("D64 plain causal 16k", 16384, 192, 128, -1, 0, 546), ("D64 plain full 16k", 16384, 192, 128, -1, -1, 542),
    ("D64 plain causal 5696", 5696, 192, 128, -1, 0, 455), ("D64 plain full 5696", 5696, 192, 128, -1, -1, 502),
    ("D64 causal W4096", 16384, 192, 128, 4096, 0, 483), ("D64 2side W4096", 16384, 192, 128, 4096, 4096, 536),
    ("D64 causal W1024 128x128", 16384, 128, 128, 1024, 0, None),
    ("D128 2side W1024 128x176", 16384, 128, 176, 1024, 1024, None),
]

if __name__ == "__main__":
    print(f"{'shape':26} {'blocks/tile':>11} {'masked/tile':>11} {'comp/vis':>8} {'comp/vis per group':>18} "
          f"{'TF vis':>6} {'TF comp':>7}")
    for name, T, BM, BN, left, right, tf in ROWS:
        vis = visible(T, left, right)
        comp, nt, blocks, masked = tiles(T, BM, BN, left, right)
        grp = per_group(T, BM, BN, left, right)
        tfc = f"{tf * comp / vis:7.0f}" if tf else ""
        print(f"{name:26} {blocks / nt:11.2f} {masked / nt:11.2f} {comp / vis:8.3f} {grp / vis:18.3f} "
              f"{tf or '':>6} {tfc}")
