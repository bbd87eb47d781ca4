"""The one timing method of every suite, as triton.testing.do_bench does it (CUDA events around each
call, the L2 cleared before each by a 256 MB write, ~25 ms of warm-up, ~100 ms of calls, median),
with the implementations of a row interleaved call by call (time_interleaved)."""

_flush = None


def l2_flush_buffer():
    """The 256 MB buffer whose zeroing clears the L2 before each timed call (allocated once)."""
    import torch
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    return _flush


def bench_estimate_ms(fn):
    """One call's time in ms from five calls after a first one, each after an L2 clear (at least 1 us)."""
    import torch
    flush = l2_flush_buffer()
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    stop.record()
    torch.cuda.synchronize()
    return max(start.elapsed_time(stop) / 5, 1e-3)


def rel_error(x, ref):
    """||x - ref|| / ||ref|| in fp32; inf when x has a NaN or an inf (the row then fails)."""
    x, ref = x.float(), ref.float()
    if not bool(x.isfinite().all()):
        return float("inf")
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def time_interleaved(fns, rounds=1, warmup_ms=25.0, rep_ms=100.0):
    """Times every callable of {name: fn}, call by call: each pass runs n cycles, and each cycle
    calls every implementation once (the L2 cleared before each call), in an order shuffled per
    cycle (seeded by pass and cycle, so reruns repeat it). Each name's time is the median of its
    per-pass medians. At the 700 W cap the clock follows the power of the last few milliseconds:
    timed one after another, each implementation ran in its own stretch of clock and power state
    (an A/B of one kernel against itself differed by up to 8 % on the longest rows with a fixed
    order, and by 4-6 % on one row with passes in shuffled order); interleaved call by call, every
    implementation samples the same states. n: ~rep_ms of the slowest implementation's calls
    (5 to 1,000 cycles), after ~warmup_ms of cycles."""
    import random
    import torch
    flush = l2_flush_buffer()
    names = list(fns)
    if not names:
        return {}
    estimate = {n: bench_estimate_ms(fns[n]) for n in names}
    slowest = max(estimate.values())
    for _ in range(max(1, int(warmup_ms / slowest))):
        for n in names:
            fns[n]()
    cycles = max(5, min(1000, int(rep_ms / slowest)))
    samples = {n: [] for n in names}
    for r in range(max(1, rounds)):
        rng = random.Random(r)
        events = {n: [] for n in names}
        for _ in range(cycles):
            order = list(names)
            rng.shuffle(order)
            for n in order:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                flush.zero_()
                a.record()
                fns[n]()
                b.record()
                events[n].append((a, b))
        torch.cuda.synchronize()
        for n in names:
            times = sorted(a.elapsed_time(b) for a, b in events[n])
            samples[n].append(times[len(times) // 2])
    return {n: sorted(v)[len(v) // 2] for n, v in samples.items()}
