#!/usr/bin/env python3
"""Timing model of the Hopper backward's deterministic orders (bench/NOTES.md, sm90 backward v16).

The list-scheduling model of bench/sm90_bwd_sched_model.py (CTAs dispatched in grid order to the
first free SM, one resident per SM, OVERHEAD µs per CTA, STEP µs per (query head, query block)
step) with the dQ writer's semaphore added, step by step: a consumer computes step k (STEP), stages
its dQ chunk once the writer has given the buffer back (the previous add *read*, READ µs after its
issue), and goes on; the writer issues the add of step k once it is staged and, deterministic, once
the previous key block in the add order has *completed* its add of the same block (its issue +
LAT µs), then waits for its own completion before the next step (the kernel's bulk_wait_all before
the release). Non-deterministic: no semaphore, no completion wait. Since a CTA waits only for CTAs
earlier in the grid, the CTAs are computed in grid order. Causal, seqlen_q = seqlen_k, no window.
Orders: v9 (key blocks descending in a chunk, head-by-head walk, adds from the last key block
down), v10 (key blocks ascending, query blocks descending with the heads innermost, adds from key
block 0 up). Prints the main kernel's det / non-det time ratio (the kernels around it, ~10-40 µs,
are not in it: the measured ratios are a little closer to 1 at short T).
v18 (bench/NOTES.md) added --writers (deterministic dQ writer warps taking alternate steps: each
writer's completion chain covers every --writers-th step), --wbusy (µs a writer stays busy per step
beyond its adds' completion: its polls, syncs, read wait), --poll (µs from a release to the next key
block's issue) and --staging (staging buffers per consumer). Refitted to v16's and v18's
measurements: --lat 1.5 --wbusy 1.5 (one writer and --writers 2).
  python3 bench/sm90_bwd_det_sched_model.py [--lat 1.5] [--read 0.3] [--overhead 3] [--writers 1] [--wbusy 0]
      [--shapes D:H:HKV:T,...]
"""
import argparse
import heapq

from sm90_bwd_sched_model import add_grid_args, chunk_heads  # the grid's chunking and options (same folder)

STEP_US = {64: 3.25, 128: 2.77}  # per step and SM: v9's 421 / 496 TFLOP/s at T = 16384 (NOTES, v9)


def simulate(T, D, H, HKV, B, order, args):
    bm, bn = (128 if D == 64 else 64), 128
    nb, nm, group = T // bn, T // bm, H // HKV
    num_bh = B * HKV
    ch = chunk_heads(num_bh, nb, nm * bm, D, args.sms)
    step, lat, rd = STEP_US[D], args.lat, args.read
    det = order != "nondet"
    free = [0.0] * args.sms
    done = {}  # (bh, h, m) -> completion time of the last add so far (the semaphore's)
    end = 0.0
    for c0 in range(0, num_bh, ch):
        heads = range(c0, min(c0 + ch, num_bh))
        blocks = range(nb - 1, -1, -1) if order == "v9" else range(nb)
        for n in blocks:
            for bh in heads:
                t = heapq.heappop(free) + args.overhead
                m0 = n * bn // bm
                if order == "v10":
                    walk = [(h, m) for m in range(nm - 1, m0 - 1, -1) for h in range(group)]
                else:
                    walk = [(h, m) for h in range(group) for m in range(m0, nm)]
                x = t  # consumer: end of the current step's compute
                bufs = [t] * args.staging  # when each staging buffer is free (read), round robin
                wdone = [t] * args.writers  # when each dQ writer warp is free (v18: two, alternate steps)
                for k, (h, m) in enumerate(walk):
                    wi = k % args.writers if det else 0
                    x = x + step
                    staged = max(x, bufs[k % args.staging])
                    x = staged  # the next step's products start after the staging
                    issue = max(staged, wdone[wi])
                    if det:
                        issue = max(issue, done.get((bh, h, m), -1e9) + args.poll)
                    bufs[k % args.staging] = issue + rd
                    buf_free = bufs[k % args.staging]
                    comp = issue + lat
                    if det:
                        done[(bh, h, m)] = comp
                        wdone[wi] = comp + args.wbusy
                    else:
                        wdone[wi] = buf_free
                finish = max([x] + wdone)
                heapq.heappush(free, finish)
                end = max(end, finish)
    return end


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lat", type=float, default=1.5, help="µs from a bulk add's issue to its completion")
    ap.add_argument("--read", type=float, default=0.3, help="µs from its issue to the staging buffer's release")
    add_grid_args(ap)
    ap.add_argument("--writers", type=int, default=1,
                    help="deterministic: dQ writer warps taking alternate steps (v18: 2; the staging stays one buffer)")
    ap.add_argument("--poll", type=float, default=0.0,
                    help="µs from a release to the next key block's issue (its poll seeing it)")
    ap.add_argument("--wbusy", type=float, default=0.0,
                    help="deterministic: µs a writer stays busy per step beyond its adds' completion (polls, syncs)")
    ap.add_argument("--staging", type=int, default=1, help="dQ staging buffers per consumer (round robin)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--shapes", default="", help="D:H:HKV:T,... (default: the device run's list)")
    args = ap.parse_args()
    shapes = [(64, 12, 12, t) for t in (1024, 2048, 4096, 8192, 16384)] + \
             [(128, 16, 16, t) for t in (1024, 2048, 4096, 8192, 16384)] + [(128, 32, 8, 8192), (64, 32, 8, 8192)]
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split(":")) for s in args.shapes.split(",")]
    print(f"writers {args.writers}, wbusy {args.wbusy} µs, staging {args.staging}, poll {args.poll} µs, lat {args.lat} µs, read {args.read} µs, overhead {args.overhead} µs, {args.sms} SMs, B{args.batch}, causal")
    print("shape                 | main kernel µs: non-det / v9 det / v10 det | det/non-det v9 · v10")
    for D, H, HKV, T in shapes:
        base = simulate(T, D, H, HKV, args.batch, "nondet", args)
        v9 = simulate(T, D, H, HKV, args.batch, "v9", args)
        v10 = simulate(T, D, H, HKV, args.batch, "v10", args)
        print(f"D{D} H{H}/{HKV} T{T:<6d}     | {base:9.0f} / {v9:9.0f} / {v10:9.0f}       | "
              f"{base / v9:.2f} · {base / v10:.2f}", flush=True)


if __name__ == "__main__":
    main()
