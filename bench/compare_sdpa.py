#!/usr/bin/env python3
"""flashbox against PyTorch SDPA on the same GPU, in one process, on the same tensors.

Loads libflashbox.so through ctypes (path argument or FLASHBOX_LIBRARY), and times flashbox FLASH
(and NAIVE where its T x T scratch fits) and SDPA's flash, cuDNN and memory-efficient backends with
one method: triton.testing.do_bench (CUDA events, warm-up, L2 flushed between runs, median).
Every implementation reads the same torch tensors ([B, H, T, D] contiguous; flashbox receives their
data_ptr and strides) and runs on torch's current stream. flashbox's output is checked against SDPA's.

Default sweep: bf16, causal, B4 H12 D64 and B4 H16 D128, T = 512 ... 16384.
  python3 bench/compare_sdpa.py build/libflashbox.so --json bench/results/compare_sdpa.json
Options: --non-causal, --backward (flashbox_attention_backward; skipped with a note when it answers
UNSUPPORTED), --seqlens 1024,4096, --configs 64:12,128:16, --no-naive, --flash-arch sm80|sm90,
--also-families sm80,sm90 (the same call, forward or backward, again with options.family forced to
each, rows "flashbox_sm80" / "flashbox_sm90": e.g. head_dim 96 and 192 on the Hopper kernels against
the sm80 ones and cuDNN in one run: --configs 96:16,192:8 --also-families sm80,sm90; forward only, an
entry tileMxN forces the sm90 tile, e.g. tile128x64 at head_dim 192: the head_dim 256 kernel, the path
before the 192 one).
Writes a report document whose steps.peers follows docs/report-schema.md (`flashbox report --merge`).
"""
import argparse
import ctypes
import json
import math
import os
import sys
import time

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

FLASHBOX_CUDA, FLASHBOX_BFLOAT16, FLASHBOX_FLOAT16 = 1, 2, 1
FLASHBOX_NAIVE, FLASHBOX_FLASH = 1, 3
ERR_OUT_OF_MEMORY, ERR_UNSUPPORTED_IMPL = 11, 7
I64x3 = ctypes.c_int64 * 3


class AttentionArgs(ctypes.Structure):  # flashbox_attention_args, include/flashbox/flashbox.h
    _fields_ = [("device", ctypes.c_int), ("dtype", ctypes.c_int), ("impl", ctypes.c_int),
                ("batch", ctypes.c_int64), ("seqlen_q", ctypes.c_int64), ("seqlen_k", ctypes.c_int64),
                ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
                ("lse", ctypes.c_void_p),
                ("q_stride", I64x3), ("k_stride", I64x3), ("v_stride", I64x3), ("o_stride", I64x3),
                ("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int), ("stream", ctypes.c_void_p)]


class GradArgs(ctypes.Structure):  # flashbox_attention_grad_args
    _fields_ = [("fwd", AttentionArgs), ("dout", ctypes.c_void_p), ("dout_stride", I64x3),
                ("dq", ctypes.c_void_p), ("dk", ctypes.c_void_p), ("dv", ctypes.c_void_p),
                ("dq_stride", I64x3), ("dk_stride", I64x3), ("dv_stride", I64x3), ("deterministic", ctypes.c_int)]


class Options(ctypes.Structure):  # flashbox_options
    _fields_ = [("struct_size", ctypes.c_int32), ("family", ctypes.c_int), ("sm90_tile_m", ctypes.c_int32),
                ("sm90_tile_n", ctypes.c_int32), ("sm90_schedule", ctypes.c_int), ("sm90_max_ctas", ctypes.c_int32),
                ("sm90_l2_section_mb", ctypes.c_int32), ("sm80_bwd_block_q", ctypes.c_int32)]


FAMILIES = {"auto": 0, "sm80": 1, "sm90": 2}
SCHEDULES = {"grid": 1, "persistent": 2}


def options(family="auto", settings=None):
    """flashbox_options for a family and a variant given as the names of the environment overrides
    (README, "Overrides"), e.g. {"FLASHBOX_SM90_TILE": "128x176", "FLASHBOX_SM90_SCHED": "grid"}:
    the overrides are read once per process, so variants timed in one process go through options."""
    o = Options(ctypes.sizeof(Options), FAMILIES[family], 0, 0, 0, 0, -1, 0)
    for key, value in (settings or {}).items():
        if key == "FLASHBOX_SM90_TILE":
            o.sm90_tile_m, o.sm90_tile_n = (int(x) for x in value.split("x"))
        elif key == "FLASHBOX_SM90_SCHED":
            o.sm90_schedule = SCHEDULES[value]
        elif key == "FLASHBOX_SM90_CTAS":
            o.sm90_max_ctas = int(value)
        elif key == "FLASHBOX_SM90_L2MB":
            o.sm90_l2_section_mb = int(value)
        elif key == "FLASHBOX_BWD_BLOCK_Q":
            o.sm80_bwd_block_q = int(value)
        elif key in ("FLASHBOX_FLASH_ARCH", "FLASHBOX_BWD_ARCH"):
            o.family = FAMILIES[value]
        else:
            raise ValueError(f"no option for {key}")
    return o


def variant_options(name):
    """An --also-families entry: a family (sm80, sm90) or an sm90 tile (e.g. tile128x64: family sm90
    with FLASHBOX_SM90_TILE=128x64; for head_dim 136..192 that tile names the head_dim 256 kernel)."""
    if name.startswith("tile"):
        return options("sm90", {"FLASHBOX_SM90_TILE": name[len("tile"):]})
    return options(name)


def forward_call(lib, fargs, opts=None):
    """A zero-argument forward call with options (plain forward for a build without *_opts)."""
    if opts is None or not hasattr(lib, "flashbox_attention_forward_opts"):
        return lambda: lib.flashbox_attention_forward(ctypes.byref(fargs))
    return lambda: lib.flashbox_attention_forward_opts(ctypes.byref(fargs), ctypes.byref(opts))


def load_library(path):
    path = path or os.environ.get("FLASHBOX_LIBRARY")
    if not path:
        sys.exit("compare_sdpa.py: give the path of libflashbox.so (argument or FLASHBOX_LIBRARY)")
    lib = ctypes.CDLL(os.path.abspath(path))
    lib.flashbox_attention_forward.argtypes = [ctypes.POINTER(AttentionArgs)]
    lib.flashbox_attention_forward.restype = ctypes.c_int
    lib.flashbox_attention_backward.argtypes = [ctypes.POINTER(GradArgs)]
    lib.flashbox_attention_backward.restype = ctypes.c_int
    for name in ("flashbox_last_error", "flashbox_last_kernel", "flashbox_version"):
        getattr(lib, name).restype = ctypes.c_char_p
    lib.flashbox_last_scratch_peak_bytes.restype = ctypes.c_int64
    lib.flashbox_cuda_device_count.restype = ctypes.c_int
    if hasattr(lib, "flashbox_attention_forward_opts"):  # builds from 2026-12-01 on
        lib.flashbox_attention_forward_opts.argtypes = [ctypes.POINTER(AttentionArgs), ctypes.POINTER(Options)]
        lib.flashbox_attention_forward_opts.restype = ctypes.c_int
        lib.flashbox_attention_backward_opts.argtypes = [ctypes.POINTER(GradArgs), ctypes.POINTER(Options)]
        lib.flashbox_attention_backward_opts.restype = ctypes.c_int
    return lib


def bhtd_strides(t):
    """flashbox strides (batch, seq, head) of a [B, H, T, D] torch tensor."""
    s = t.stride()
    return I64x3(s[0], s[2], s[1])


def grad_args(fwd, do, dq, dk, dv, deterministic=0):
    """flashbox_attention_grad_args for a forward's args and [B, H, T, D] torch gradient tensors."""
    g = GradArgs()
    g.fwd = fwd
    g.dout, g.dq, g.dk, g.dv = do.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    g.dout_stride, g.dq_stride, g.dk_stride, g.dv_stride = (bhtd_strides(x) for x in (do, dq, dk, dv))
    g.deterministic = deterministic
    return g


def make_args(q, k, v, o, lse, impl, causal):
    B, H, T, D = q.shape
    a = AttentionArgs()
    a.device, a.impl, a.causal = FLASHBOX_CUDA, impl, int(causal)
    a.dtype = FLASHBOX_BFLOAT16 if q.dtype == torch.bfloat16 else FLASHBOX_FLOAT16
    a.batch, a.seqlen_q, a.seqlen_k, a.heads_q, a.heads_kv, a.head_dim = B, T, k.shape[2], H, k.shape[1], D
    a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    a.lse = lse.data_ptr() if lse is not None else None
    a.q_stride, a.k_stride, a.v_stride, a.o_stride = (bhtd_strides(x) for x in (q, k, v, o))
    a.softmax_scale = 0.0
    a.stream = torch.cuda.current_stream().cuda_stream
    return a


class FlashboxError(RuntimeError):
    def __init__(self, code, msg):
        super().__init__(f"flashbox error {code}: {msg}")
        self.code = code


def checked(lib, rc):
    if rc != 0:
        raise FlashboxError(rc, lib.flashbox_last_error().decode())


def sdpa(backend, causal):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


PEERS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
         "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def flops(B, H, T, D, causal, backward):
    f = 4.0 * B * H * T * T * D * (0.5 if causal else 1.0)
    return f * (2.5 if backward else 1.0)


def rel_error(x, ref):
    x, ref = x.float(), ref.float()
    if not torch.isfinite(x).all():
        return float("inf")
    return ((x - ref).norm() / ref.norm()).item()


def measure_case(lib, B, H, T, D, causal, backward, with_naive, dtype, also_families=()):
    """Rows (report schema) for one shape: flashbox flash, flashbox naive, the three SDPA backends."""
    rows, notes = [], {}
    torch.cuda.empty_cache()
    gen = torch.Generator(device="cuda").manual_seed(1000 + T + D)
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
    base = dict(head_dim=D, heads=H, batch=B, seqlen=T, causal=causal,
                direction="backward" if backward else "forward")
    fl = flops(B, H, T, D, causal, backward)

    def row(impl, ms, extra, **kw):
        r = dict(impl=impl, **base, ms=ms, tflops=(fl / (ms * 1e-3) / 1e12 if ms else None), extra_bytes=extra)
        r.update(kw)
        rows.append(r)
        return r

    # SDPA reference output (flash backend) for the correctness check.
    ref = sdpa(SDPBackend.FLASH_ATTENTION, causal)(q, k, v)

    # flashbox FLASH
    fargs = make_args(q, k, v, o, lse, FLASHBOX_FLASH, causal)
    checked(lib, lib.flashbox_attention_forward(ctypes.byref(fargs)))
    torch.cuda.synchronize()
    kernel = lib.flashbox_last_kernel().decode()
    err = rel_error(o, ref)
    if not backward:
        ms = bench(lambda: lib.flashbox_attention_forward(ctypes.byref(fargs)))
        row("flashbox", ms, int(lib.flashbox_last_scratch_peak_bytes()), kernel=kernel, rel_error_vs_sdpa=err)
        # The same call with the family forced (options.family): a family that declines the shape
        # gives a row with its reason.
        for fam in also_families:
            call = forward_call(lib, fargs, variant_options(fam))
            o.fill_(float("nan"))
            rc = call()
            if rc != 0:
                row("flashbox_" + fam, None, None, status="error", error="declined: " + lib.flashbox_last_error().decode())
                continue
            torch.cuda.synchronize()
            fkernel, ferr = lib.flashbox_last_kernel().decode(), rel_error(o, ref)
            row("flashbox_" + fam, bench(call), int(lib.flashbox_last_scratch_peak_bytes()), kernel=fkernel,
                rel_error_vs_sdpa=ferr)
    else:
        do = torch.randn_like(q)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        g = grad_args(fargs, do, dq, dk, dv)
        rc = lib.flashbox_attention_backward(ctypes.byref(g))
        if rc == ERR_UNSUPPORTED_IMPL:
            notes["flashbox"] = "backward UNSUPPORTED: " + lib.flashbox_last_error().decode()
            row("flashbox", None, None, status="unsupported", error=notes["flashbox"])
        elif rc != 0:
            row("flashbox", None, None, status="error", error=lib.flashbox_last_error().decode())
        else:
            torch.cuda.synchronize()
            kernel = lib.flashbox_last_kernel().decode()
            scratch = int(lib.flashbox_last_scratch_peak_bytes())
            # The gradients against SDPA's flash backend on the same dO: the largest of the three errors.
            qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
            grads = torch.autograd.grad(sdpa(SDPBackend.FLASH_ATTENTION, causal)(qg, kg, vg), (qg, kg, vg), do)
            gerr = max(rel_error(mine, theirs) for mine, theirs in zip((dq, dk, dv), grads))
            del qg, kg, vg, grads
            ms = bench(lambda: lib.flashbox_attention_backward(ctypes.byref(g)))
            row("flashbox", ms, scratch, kernel=kernel, rel_error_vs_sdpa=gerr)
            # The same backward with the family forced (e.g. sm80: what ran before the sm90 d256
            # backward), its gradients checked against the same SDPA ones.
            for fam in also_families:
                opts = options(fam)
                call = lambda: lib.flashbox_attention_backward_opts(ctypes.byref(g), ctypes.byref(opts))  # noqa: E731
                for x in (dq, dk, dv):
                    x.fill_(float("nan"))
                rc = call()
                if rc != 0:
                    row("flashbox_" + fam, None, None, status="error", error="declined: " + lib.flashbox_last_error().decode())
                    continue
                torch.cuda.synchronize()
                fkernel, fscratch = lib.flashbox_last_kernel().decode(), int(lib.flashbox_last_scratch_peak_bytes())
                qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
                grads = torch.autograd.grad(sdpa(SDPBackend.FLASH_ATTENTION, causal)(qg, kg, vg), (qg, kg, vg), do)
                ferr = max(rel_error(mine, theirs) for mine, theirs in zip((dq, dk, dv), grads))
                del qg, kg, vg, grads
                row("flashbox_" + fam, bench(call), fscratch, kernel=fkernel, rel_error_vs_sdpa=ferr)

    # flashbox NAIVE (forward only), where S and P fit
    if with_naive and not backward:
        nargs = make_args(q, k, v, o, lse, FLASHBOX_NAIVE, causal)
        rc = lib.flashbox_attention_forward(ctypes.byref(nargs))
        if rc == ERR_OUT_OF_MEMORY:
            row("flashbox_naive", None, None, status="oom", error=lib.flashbox_last_error().decode())
        elif rc != 0:
            row("flashbox_naive", None, None, status="error", error=lib.flashbox_last_error().decode())
        else:
            torch.cuda.synchronize()
            nerr = rel_error(o, ref)
            ms = bench(lambda: lib.flashbox_attention_forward(ctypes.byref(nargs)))
            row("flashbox_naive", ms, int(lib.flashbox_last_scratch_peak_bytes()),
                kernel=lib.flashbox_last_kernel().decode(), rel_error_vs_sdpa=nerr)
        torch.cuda.empty_cache()

    # SDPA backends
    for name, backend in PEERS.items():
        fn = sdpa(backend, causal)
        try:
            if backward:
                qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
                out = fn(qg, kg, vg)
                gout = torch.randn_like(out)
                run = lambda: torch.autograd.grad(out, (qg, kg, vg), gout, retain_graph=True)
            else:
                run = lambda: fn(q, k, v)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            run()
            torch.cuda.synchronize()
            extra = torch.cuda.max_memory_allocated() - before - (0 if backward else o.numel() * o.element_size())
            ms = bench(run)
            row(name, ms, int(max(extra, 0)))
        except Exception as e:  # a backend that cannot run this shape
            row(name, None, None, status="error", error=str(e).splitlines()[0][:160])
    del q, k, v, o, lse
    return rows, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("library", nargs="?", help="path of libflashbox.so (else FLASHBOX_LIBRARY)")
    ap.add_argument("--json", help="write the report document here")
    ap.add_argument("--non-causal", action="store_true")
    ap.add_argument("--backward", action="store_true", help="time the backward pass instead of the forward")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--configs", default="64:12,128:16", help="head_dim:heads pairs, batch 4")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--no-naive", action="store_true")
    ap.add_argument("--flash-arch", choices=["sm80", "sm90"], help="sets FLASHBOX_FLASH_ARCH")
    ap.add_argument("--also-families", default="",
                    help="also time flashbox with options.family forced to each (comma list: sm80,sm90; "
                         "forward only, tileMxN: the sm90 forward with that tile, e.g. tile128x64)")
    args = ap.parse_args()
    if args.flash_arch:
        os.environ["FLASHBOX_FLASH_ARCH"] = args.flash_arch
    lib = load_library(args.library)
    if lib.flashbox_cuda_device_count() == 0:
        sys.exit("compare_sdpa.py: flashbox sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    causal = not args.non_causal
    seqlens = [int(x) for x in args.seqlens.split(",")]
    configs = [tuple(int(y) for y in x.split(":")) for x in args.configs.split(",")]
    also = [f for f in args.also_families.split(",") if f]
    for f in also:
        if f not in ("sm80", "sm90") and not (f.startswith("tile") and "x" in f):
            sys.exit(f"compare_sdpa.py: --also-families takes sm80, sm90 and tileMxN (got {f})")
    if args.backward and any(f.startswith("tile") for f in also):
        sys.exit("compare_sdpa.py: --also-families tileMxN times the forward only")
    if also and not hasattr(lib, "flashbox_attention_forward_opts"):
        sys.exit("compare_sdpa.py: --also-families needs flashbox_attention_forward_opts (builds from 2026-12-01 on)")
    print(f"flashbox {lib.flashbox_version().decode()} | torch {torch.__version__} | triton {triton.__version__} | "
          f"{torch.cuda.get_device_name()} | {args.dtype} {'causal' if causal else 'full'} "
          f"{'backward' if args.backward else 'forward'} | do_bench median, L2 flushed", flush=True)
    all_rows, notes = [], {}
    hdr = (f"{'D':>4} {'H':>3} {'T':>6} | {'flashbox':>16} | {'naive':>16} | {'sdpa_flash':>16} | {'sdpa_cudnn':>16} | "
           f"{'sdpa_effic':>16} | fb/flash fb/cudnn fb/eff | rel_err kernel")
    print(hdr + "\n" + "-" * len(hdr), flush=True)
    for D, H in configs:
        for T in seqlens:
            rows, n = measure_case(lib, args.batch, H, T, D, causal, args.backward,
                                   not args.no_naive and not args.backward, dtype, also)
            notes.update(n)
            all_rows += rows
            by = {r["impl"]: r for r in rows}

            def cell(name):
                r = by.get(name)
                if r is None:
                    return f"{'-':>16}"
                if r.get("ms") is None:
                    return f"{r.get('status', 'n/a'):>16}"
                return f"{r['ms']:7.3f}ms {r['tflops']:5.0f}T"

            fb = by.get("flashbox", {}).get("ms")
            ratios = []
            for peer in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"):
                pm = by.get(peer, {}).get("ms")
                ratios.append(f"{fb / pm:7.3f}" if fb and pm else f"{'-':>7}")
            fbr = by.get("flashbox", {})
            print(f"{D:4d} {H:3d} {T:6d} | {cell('flashbox')} | {cell('flashbox_naive')} | {cell('sdpa_flash')} | "
                  f"{cell('sdpa_cudnn')} | {cell('sdpa_efficient')} | {' '.join(ratios)} | "
                  f"{fbr.get('rel_error_vs_sdpa', float('nan')):.1e} {fbr.get('kernel', '')}", flush=True)
            for fam in also:
                r = by.get("flashbox_" + fam, {})
                cud = by.get("sdpa_cudnn", {}).get("ms")
                if r.get("ms") is None:
                    print(f"{'':15} | flashbox_{fam}: {r.get('status', 'n/a')}: {r.get('error', '')}", flush=True)
                    continue
                vs_auto = f"{r['ms'] / fb:6.3f}" if fb else "-"
                vs_cudnn = f"{r['ms'] / cud:6.3f}" if cud else "-"
                print(f"{'':15} | flashbox_{fam} {cell('flashbox_' + fam)} | /auto {vs_auto} /cudnn {vs_cudnn} | "
                      f"{r.get('rel_error_vs_sdpa', float('nan')):.1e} {r.get('kernel', '')}", flush=True)
    peers = {"measured": bool(all_rows), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
             "triton": triton.__version__, "cudnn": torch.backends.cudnn.version(),
             "flashbox_version": lib.flashbox_version().decode(),
             "flash_arch": os.environ.get("FLASHBOX_FLASH_ARCH", "auto"),
             "method": "triton.testing.do_bench(warmup=25, rep=100, return_mode='median'), same torch tensors, "
                       "same stream, one process",
             "dtype": args.dtype, "rows": all_rows}
    if notes:
        peers["notes"] = notes
    doc = {"schema_version": 1, "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "steps": {"peers": peers}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
