"""CUDA-event timing shared by the bench scripts (ext_sm80_cost.py, prefill_crossover.py,
decode_bench.py): each trial records an event, runs a batch of back-to-back calls, records a second
event and waits for it. Warm-up, the number of trials and of calls, and how the trials are reduced to
one figure (and in what unit) stay each script's own, as its docstring says.

Import it as the bench scripts import one another (compare_masks.py takes compare_sdpa's bench):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cuda_timing import event_ms
torch is imported on the first call, so a script that imports torch only where it times (its --help
then runs without torch) can import this module at its top.
"""


def event_ms(fn, trials, calls=1):
    """Milliseconds of each of `trials` batches of `calls` back-to-back fn() calls, each batch between
    two CUDA events on the current stream (the queue stays full within a batch, so the Python cost of a
    call hides behind the previous kernel). No warm-up: the caller does its own."""
    import torch

    times = []
    for _ in range(trials):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return times
