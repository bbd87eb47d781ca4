"""The one timing method of every suite, as triton.testing.do_bench does it: CUDA events around each
call, the L2 cleared before each (a 256 MB write), warm-up for ~25 ms, then ~100 ms of calls, median."""

_flush = None


def bench_ms(fn, warmup_ms=25.0, rep_ms=100.0):
    import torch
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        _flush.zero_()
        fn()
    stop.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(stop) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    n = max(5, min(1000, int(rep_ms / estimate)))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in events:
        _flush.zero_()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in events)
    return times[len(times) // 2]


def rel_error(x, ref):
    """||x - ref|| / ||ref|| in fp32; inf when x has a NaN or an inf (the row then fails)."""
    x, ref = x.float(), ref.float()
    if not bool(x.isfinite().all()):
        return float("inf")
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def time_interleaved(fns, rounds=1):
    """Times every callable of {name: fn} in `rounds` passes; each name's time is the median of its
    per-pass medians. Pass 0 runs in the given order, every later pass in a shuffled one (seeded by
    the pass number, so reruns repeat it). A rotation is not enough at the 700 W cap: it keeps the
    cyclic order, so each implementation always ran right after the same neighbour and inherited its
    clock and power state (an A/B of one kernel against itself then differed by up to 8 % on the
    longest rows); shuffled, each one follows different neighbours."""
    import random
    names = list(fns)
    samples = {n: [] for n in names}
    for r in range(max(1, rounds)):
        order = list(names)
        if r:
            random.Random(r).shuffle(order)
        for n in order:
            samples[n].append(bench_ms(fns[n]))
    return {n: sorted(v)[len(v) // 2] for n, v in samples.items()}
