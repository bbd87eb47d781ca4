"""PyTorch SDPA timed the way `flashbox report` times flashbox (src/report/bench_cuda.cpp, bench_cpu.cpp).

`flashbox report` embeds this file, writes it to a temporary folder and runs it with the first Python
that has torch (its report step "peers", src/report/step_peers.cpp). Same shapes as the report's
bench step, same method: on the GPU, input sets rotated until together they exceed twice the L2
cache, `--warmup` untimed calls, then `--repeats` calls each timed by its own pair of CUDA events on
torch's current stream, median; on the CPU the same with a wall clock. The extra memory is the peak
of torch's allocator during one call beyond what was allocated before it, less the outputs (as
flashbox's scratch peak leaves out o, dq, dk, dv). Writes steps.peers of docs/report-schema.md.

One process times both directions (torch is imported once). Progress goes to stdout as lines
`progress DONE TOTAL WHAT`; errors that stop the whole run exit
with status 3 and one line on stderr, e.g. when torch cannot be imported.
"""
import argparse
import json
import statistics
import sys
import time

try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
except Exception as e:  # ImportError, or a torch build that fails to load
    print(f"cannot import torch: {e}", file=sys.stderr)
    sys.exit(3)

BACKENDS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION, "sdpa_math": SDPBackend.MATH}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
MAX_SETS = 64
OutOfMemory = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def flops(a, t, backward):
    f = 4.0 * a.batch * a.heads * t * t * a.head_dim * (0.5 if a.causal else 1.0)
    return f * (2.5 if backward else 1.0)


class Timer:
    """One call's time: CUDA events on the current stream (GPU), perf_counter (CPU)."""

    def __init__(self, cuda):
        self.cuda = cuda
        if cuda:
            self.begin, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def time_ms(self, fn):
        if self.cuda:
            self.begin.record()
            fn()
            self.end.record()
            self.end.synchronize()
            return self.begin.elapsed_time(self.end)
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3


def make_sets(a, t, backward, device):
    """Input sets (q, k, v[, dout]) in [B, H, T, D], enough to exceed the rotation bytes."""
    shape = (a.batch, a.heads, t, a.head_dim)
    elem = torch.empty((), dtype=DTYPES[a.dtype]).element_size()
    per_set = (4 if backward else 3) * a.batch * a.heads * t * a.head_dim * elem
    wanted = max(1, min(MAX_SETS, -(-a.rotate_bytes // per_set))) if device == "cuda" else 2
    gen = torch.Generator(device=device).manual_seed(a.seed + t)
    sets = []
    try:
        for _ in range(wanted):
            sets.append([torch.randn(shape, device=device, dtype=DTYPES[a.dtype], generator=gen)
                         for _ in range(4 if backward else 3)])
    except OutOfMemory:
        if not sets:
            raise
    return sets


def measure(a, impl, t, backward, device, sets, timer):
    row = dict(impl=impl, device=device, batch=a.batch, heads=a.heads, head_dim=a.head_dim, seqlen=t,
               causal=a.causal, dtype=a.dtype, direction="backward" if backward else "forward",
               ms=None, tflops=None, extra_bytes=None, status="ok", input_sets=len(sets), repeats=0)
    cuda = device == "cuda"
    backend = BACKENDS[impl]

    def attend(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=a.causal)

    # The backend is chosen once around everything, so no call pays for entering the context.
    backend_context = sdpa_kernel(backend)
    backend_context.__enter__()
    try:
        if backward:
            # One retained graph per set: a timed call is the backward alone, as flashbox's is.
            graphs = []
            for q, k, v, dout in sets:
                q, k, v = (x.requires_grad_(True) for x in (q, k, v))
                graphs.append((attend(q, k, v), (q, k, v), dout))

            def call(i):
                out, inputs, dout = graphs[i % len(graphs)]
                return torch.autograd.grad(out, inputs, dout, retain_graph=True)
        else:
            def call(i):
                q, k, v = sets[i % len(sets)][:3]
                return (attend(q, k, v),)

        for i in range(a.warmup):
            call(i)
        if cuda:
            torch.cuda.synchronize()
        times = [timer.time_ms(lambda i=i: call(i)) for i in range(a.repeats)]
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            outputs = call(0)
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            row["extra_bytes"] = max(0, int(peak - before - sum(o.numel() * o.element_size() for o in outputs)))
            del outputs
        else:
            row["extra_bytes_note"] = "torch keeps no allocator statistics on the CPU"
        row["repeats"] = len(times)
        row["ms"] = statistics.median(times)
        row["tflops"] = flops(a, t, backward) / (row["ms"] * 1e-3) / 1e12 if row["ms"] > 0 else 0.0
    except OutOfMemory as e:
        row.update(status="oom", error=str(e).splitlines()[0][:200])
    except Exception as e:  # a backend that cannot run this shape ("No available kernel")
        row.update(status="error", error=(str(e).strip().splitlines() or [type(e).__name__])[0][:200])
    finally:
        backend_context.__exit__(None, None, None)
        if cuda:
            torch.cuda.synchronize()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cuda", "cpu"], required=True)
    ap.add_argument("--impls", required=True, help="comma list of " + ", ".join(BACKENDS))
    ap.add_argument("--forward-seqlens", default="", help="comma list of T for the forward (empty: none)")
    ap.add_argument("--backward-seqlens", default="", help="comma list of T for the backward (empty: none)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    ap.add_argument("--causal", type=int, choices=[0, 1], default=1)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rotate-bytes", type=int, default=0, help="0: twice the GPU's L2")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    a.causal = bool(a.causal)
    impls = [x for x in a.impls.split(",") if x]
    for impl in impls:
        if impl not in BACKENDS:
            ap.error(f"unknown implementation {impl!r}")
    sweeps = [(d, [int(x) for x in v.split(",") if x]) for d, v in
              (("forward", a.forward_seqlens), ("backward", a.backward_seqlens))]
    sweeps = [(d, t) for d, t in sweeps if t]
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print(f"torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        sys.exit(3)
    torch.backends.cuda.matmul.allow_tf32 = False
    if cuda and a.rotate_bytes <= 0:
        a.rotate_bytes = 2 * torch.cuda.get_device_properties(0).L2_cache_size
    timer = Timer(cuda)
    rows = []
    total, done = sum(len(t) for _, t in sweeps) * len(impls), 0
    for direction, seqlens in sweeps:
        backward = direction == "backward"
        for t in seqlens:
            try:
                sets = make_sets(a, t, backward, a.device)
            except OutOfMemory as e:
                sets, why = None, str(e).splitlines()[0][:200]
            for impl in impls:
                print(f"progress {done} {total} {direction} T={t} {impl}", flush=True)
                if sets is None:
                    rows.append(dict(impl=impl, device=a.device, batch=a.batch, heads=a.heads, head_dim=a.head_dim,
                                     seqlen=t, causal=a.causal, dtype=a.dtype, direction=direction, ms=None,
                                     tflops=None, extra_bytes=None, status="oom", error=why))
                else:
                    rows.append(measure(a, impl, t, backward, a.device, sets, timer))
                done += 1
            del sets
            if cuda:
                torch.cuda.empty_cache()
    print(f"progress {total} {total} done", flush=True)
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    peers = {"measured": True, "source": "flashbox report (src/report/sdpa_peers.py)",
             "device": device_name, "torch": torch.__version__, "python": sys.executable,
             "cudnn": torch.backends.cudnn.version() if cuda else None,
             "method": (f"as steps.bench: {a.warmup} warm-up calls, median of {a.repeats} calls each timed by CUDA "
                        f"events, inputs rotated among sets exceeding {a.rotate_bytes} bytes" if cuda else
                        f"as steps.bench: {a.warmup} warm-up calls, median of {a.repeats} wall-clock timed calls"),
             "same_method_as_bench": True, "rows": rows}
    with open(a.json, "w") as f:
        json.dump(peers, f, indent=1)


if __name__ == "__main__":
    main()
