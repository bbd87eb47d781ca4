#!/usr/bin/env python3
"""The extension's masks and score transforms (flashbox_attention_forward_ext) against the plain
kernel, with PyTorch SDPA for context, in one process on the same tensors (compare_sdpa.py's method:
triton.testing.do_bench, L2 flushed, median; [B, H, T, D] contiguous torch tensors).

For each (head_dim, T) it times flashbox plain causal and non-causal, sliding windows (causal
(W, 0) and two-sided (W, W)), softcap 30 (causal and not) and ALiBi (causal), and SDPA's flash and
cuDNN backends on the plain masks (SDPA has no window or softcap; its memory-efficient backend with
an additive float mask is timed for the window too, and gives the reference for the window's error).
TFLOP/s count 4 * B * H * D per visible (query, key) pair, so a window's rate is comparable with the
plain kernel's: the bar is that window and softcap cost under 10 % (ratio >= 0.9).

  python3 bench/compare_masks.py build/libflashbox.so --json bench/results/<dir>/compare_masks.json

--backward: instead, the backward (flashbox_attention_backward_ext after one forward_ext of the same
variant) of the same flashbox variants and same-work plain rows, TFLOP/s = 2.5 x the forward's
count over the visible pairs (SDPA is left out: compare_sdpa.py --backward has it on the plain
masks). The sm90 backward takes every variant since 2026-12-01; FLASHBOX_BWD_ARCH=sm80 in the
environment times the sm80 backward instead.

--d256 SHIM: instead, head_dim 256 plain causal and non-causal through the sm90 forward's plan
(bench/sm90_plan_shim.cpp, built as build/tests/sm90/libsm90_plan_shim.so: the C API does not open
256 for CUDA yet) against SDPA's flash and cuDNN backends, TFLOP/s over 4 B H T^2 D (halved causal).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_sdpa import (FLASHBOX_FLASH, AttentionArgs, GradArgs, bench, checked,  # noqa: E402
                          grad_args, load_library, make_args, rel_error)


class Ext(ctypes.Structure):  # flashbox_attention_ext, include/flashbox/flashbox.h
    _fields_ = [("struct_size", ctypes.c_int32), ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),
                ("softcap", ctypes.c_float), ("alibi_slopes", ctypes.c_void_p), ("alibi_batch_stride", ctypes.c_int64),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64)]


def ext(window=(-1, -1), softcap=0.0, slopes=None):
    e = Ext()
    e.struct_size = ctypes.sizeof(Ext)
    e.window_left, e.window_right = window
    e.softcap = softcap
    e.alibi_slopes = slopes.data_ptr() if slopes is not None else None
    return e


def visible_pairs(T, causal, window):
    """(query, key) pairs a [T, T] call computes (FA2 semantics, seqlen_q = seqlen_k)."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(T, dtype=torch.int64)
    begin = (i - left).clamp(0, T) if left >= 0 else torch.zeros_like(i)
    end = (i + right + 1).clamp(0, T) if right >= 0 else torch.full_like(i, T)
    return int((end - begin).clamp(min=0).sum())


def same_work_seqlen(T, causal, window):
    """The plain call's T' at a window's work: a causal triangle (or non-causal square) holding as many
    visible pairs as the [T, T] window call, rounded to 64."""
    pairs = visible_pairs(T, causal, window)
    return int(round((math.sqrt(2 * pairs) if causal else math.sqrt(pairs)) / 64)) * 64


def window_mask(T, causal, window, device, dtype):
    left, right = window
    if causal:
        right = 0
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    ok = torch.ones(T, T, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return torch.zeros(T, T, device=device, dtype=dtype).masked_fill(~ok, float("-inf"))


def measure(lib, B, H, T, D, dtype, windows, only=None, backward=False):
    gen = torch.Generator(device="cuda").manual_seed(2000 + T + D)
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
    if backward:
        do = torch.randn(B, H, T, D, device="cuda", dtype=dtype, generator=gen)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    work = 2.5 if backward else 1.0  # backward FLOPs per forward FLOP (five products against two)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device="cuda", dtype=torch.float32)
    rows = []

    def row(impl, variant, causal, window, ms, **kw):
        pairs = visible_pairs(T, causal, window)
        r = dict(impl=impl, variant=variant, dtype=str(dtype).replace("torch.", ""), head_dim=D, heads=H, batch=B,
                 seqlen=T, causal=causal,
                 window=list(window), direction="backward" if backward else "forward", ms=ms, visible_pairs=pairs,
                 tflops=(work * 4.0 * B * H * D * pairs / (ms * 1e-3) / 1e12 if ms else None))
        r.update(kw)
        rows.append(r)

    def fb(variant, causal, window=(-1, -1), softcap=0.0, use_slopes=False, ref=None):
        if only and variant not in only:
            return
        a = make_args(q, k, v, o, lse, FLASHBOX_FLASH, causal)
        e = ext(window, softcap, slopes if use_slopes else None)
        call = lambda: lib.flashbox_attention_forward_ext(ctypes.byref(a), ctypes.byref(e))  # noqa: E731
        try:
            checked(lib, call())
            if backward:
                torch.cuda.synchronize()
                g = grad_args(a, do, dq, dk, dv)
                call = lambda: lib.flashbox_attention_backward_ext(ctypes.byref(g), ctypes.byref(e))  # noqa: E731
                checked(lib, call())
        except RuntimeError as err:
            row("flashbox", variant, causal, window, None, status="error", error=str(err)[:200])
            return
        torch.cuda.synchronize()
        kernel = lib.flashbox_last_kernel().decode()
        extra = {}
        if ref is not None:
            extra["rel_error_vs_sdpa"] = rel_error(o, ref)
        row("flashbox", variant, causal, window, bench(call), kernel=kernel, **extra)

    def sdpa(variant, backend, causal, mask=None, window=(-1, -1)):
        if only or backward:
            return None

        def run():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                        is_causal=causal and mask is None)
        try:
            out = run()
            torch.cuda.synchronize()
            row("sdpa", variant, causal, window, bench(run), backend=str(backend))
            return out
        except Exception as err:  # a backend that cannot run this shape
            row("sdpa", variant, causal, window, None, status="error", error=str(err).splitlines()[0][:160])
            return None

    for causal in (True, False):
        ref = sdpa("flash", SDPBackend.FLASH_ATTENTION, causal)
        sdpa("cudnn", SDPBackend.CUDNN_ATTENTION, causal)
        fb("plain", causal, ref=ref)
        fb("softcap30", causal, softcap=30.0)
    mask_ok = T <= 4096 and not backward  # a T x T additive mask per call: kept small
    for w in windows:
        for causal, window in ((True, (w, -1)), (False, (w, w))):
            ref = None
            if mask_ok:
                mask = window_mask(T, causal, window, "cuda", dtype)
                ref = sdpa("efficient_masked", SDPBackend.EFFICIENT_ATTENTION, False, mask, window)
            fb(f"window{w}", causal, window, ref=ref)
    # The plain kernel at the same work as each window (same_work_seqlen): its rate is the window's
    # "same work" peer.
    for w in ([] if only else windows):
        for causal, window in ((True, (w, -1)), (False, (w, w))):
            t2 = same_work_seqlen(T, causal, window)
            q2, k2, v2 = (torch.randn(B, H, t2, D, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
            o2 = torch.empty_like(q2)
            lse2 = torch.empty(B, H, t2, device="cuda", dtype=torch.float32)
            a2 = make_args(q2, k2, v2, o2, lse2, FLASHBOX_FLASH, causal)
            call = lambda: lib.flashbox_attention_forward(ctypes.byref(a2))  # noqa: E731
            checked(lib, call())
            if backward:
                torch.cuda.synchronize()
                do2, dq2, dk2, dv2 = (torch.randn_like(q2) for _ in range(4))
                g2 = grad_args(a2, do2, dq2, dk2, dv2)
                call = lambda: lib.flashbox_attention_backward(ctypes.byref(g2))  # noqa: E731
                checked(lib, call())
            torch.cuda.synchronize()
            ms = bench(call)
            p2 = t2 * (t2 + 1) // 2 if causal else t2 * t2
            rows.append(dict(impl="flashbox", variant=f"plain_same_work_as_window{w}", head_dim=D, heads=H, batch=B,
                             seqlen=t2, causal=causal, window=[-1, -1], direction="backward" if backward else "forward",
                             ms=ms, visible_pairs=p2, tflops=work * 4.0 * B * H * D * p2 / (ms * 1e-3) / 1e12,
                             kernel=lib.flashbox_last_kernel().decode()))
            del q2, k2, v2, o2, lse2
            if backward:
                del do2, dq2, dk2, dv2, g2
    fb("alibi", True, use_slopes=True)  # its accuracy: tests/sm90/sm90_mods_test.cpp (a bf16 bias would blur it)
    fb("window1024_softcap30", True, (1024, -1), softcap=30.0)
    del q, k, v, o, lse
    torch.cuda.empty_cache()
    return rows


def measure_d256(shim, B, H, T, dtype):
    gen = torch.Generator(device="cuda").manual_seed(3000 + T)
    q, k, v = (torch.randn(B, H, T, 256, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    o = torch.empty_like(q)
    rows = []
    for causal in (True, False):
        pairs = T * (T + 1) // 2 if causal else T * T
        fl = 4.0 * B * H * 256 * pairs

        def add(impl, ms, **kw):
            rows.append(dict(impl=impl, variant="d256", head_dim=256, heads=H, batch=B, seqlen=T, causal=causal,
                             direction="forward", ms=ms, tflops=fl / (ms * 1e-3) / 1e12 if ms else None, **kw))
        refs = {}
        for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
            def run(backend=backend):
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            try:
                refs[name] = run()
                torch.cuda.synchronize()
                add(name, bench(run))
            except Exception as err:
                add(name, None, status="error", error=str(err).splitlines()[0][:160])
        a = make_args(q, k, v, o, None, FLASHBOX_FLASH, causal)
        msg = ctypes.create_string_buffer(512)
        plan = shim.fb_shim_sm90_plan(ctypes.byref(a), msg, 512)
        if not plan:
            add("flashbox", None, status="declined", error=msg.value.decode())
            continue
        rc = shim.fb_shim_sm90_run(plan)
        torch.cuda.synchronize()
        ref = refs.get("sdpa_flash")
        err = rel_error(o, ref) if ref is not None else None
        ms = bench(lambda: shim.fb_shim_sm90_run(plan)) if rc == 0 else None
        add("flashbox", ms, kernel=msg.value.decode(), rel_error_vs_sdpa=err, rc=rc)
        shim.fb_shim_sm90_free(plan)
    del q, k, v, o
    torch.cuda.empty_cache()
    return rows


def main_d256(args):
    shim = ctypes.CDLL(os.path.abspath(args.d256))
    shim.fb_shim_sm90_plan.argtypes = [ctypes.POINTER(AttentionArgs), ctypes.c_char_p, ctypes.c_int]
    shim.fb_shim_sm90_plan.restype = ctypes.c_void_p
    shim.fb_shim_sm90_run.argtypes = [ctypes.c_void_p]
    shim.fb_shim_sm90_run.restype = ctypes.c_int
    shim.fb_shim_sm90_free.argtypes = [ctypes.c_void_p]
    print(f"head_dim 256 | torch {torch.__version__} | {torch.cuda.get_device_name()} | bf16 forward | do_bench median",
          flush=True)
    rows = []
    for T in (int(x) for x in args.seqlens.split(",")):
        r = measure_d256(shim, args.batch, args.heads256, T, torch.bfloat16)
        for causal in (True, False):
            by = {x["impl"]: x for x in r if x["causal"] == causal}
            cells = []
            for impl in ("flashbox", "sdpa_flash", "sdpa_cudnn"):
                x = by.get(impl, {})
                cells.append(f"{impl} {x['tflops']:5.0f}" if x.get("tflops") else f"{impl} {x.get('status', '-')}")
            fb, cu = by.get("flashbox", {}).get("ms"), by.get("sdpa_cudnn", {}).get("ms")
            ratio = f"{cu / fb:5.3f}" if fb and cu else "  -  "
            fx = by.get("flashbox", {})
            print(f"D256 H{args.heads256} T{T:<6} {'causal' if causal else 'full  '} | {' | '.join(cells)} TFLOP/s | "
                  f"cudnn/fb time {ratio} | err {fx.get('rel_error_vs_sdpa')} {fx.get('kernel', fx.get('error', ''))}",
                  flush=True)
        rows += r
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("library", nargs="?")
    ap.add_argument("--json")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--configs", default="64:12,128:16", help="head_dim:heads pairs")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--windows", default="1024,4096")
    ap.add_argument("--backward", action="store_true", help="time the backward of each variant instead")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16",
                    help="the tensors' type (fp16: e.g. the sm90 backward's fp16 d128 kernel keeps the plain schedule, bf16 runs DQLAG)")
    ap.add_argument("--d256", metavar="SHIM", help="head_dim 256 through libsm90_plan_shim.so instead")
    ap.add_argument("--heads256", type=int, default=8)
    ap.add_argument("--only", help="comma-separated flashbox variants (plain, softcap30, alibi, window1024, ...); "
                                   "no SDPA, no same-work rows")
    args = ap.parse_args()
    if args.d256:
        rows = main_d256(args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"schema_version": 1, "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f,
                          indent=1)
            print(f"wrote {args.json}")
        return
    lib = load_library(args.library)
    lib.flashbox_attention_forward_ext.argtypes = [ctypes.POINTER(AttentionArgs), ctypes.POINTER(Ext)]
    lib.flashbox_attention_forward_ext.restype = ctypes.c_int
    lib.flashbox_attention_backward_ext.argtypes = [ctypes.POINTER(GradArgs), ctypes.POINTER(Ext)]
    lib.flashbox_attention_backward_ext.restype = ctypes.c_int
    if lib.flashbox_cuda_device_count() == 0:
        sys.exit("compare_masks.py: flashbox sees no CUDA device")
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    print(f"flashbox {lib.flashbox_version().decode()} | torch {torch.__version__} | {torch.cuda.get_device_name()} | "
          f"{args.dtype} {'backward' if args.backward else 'forward'} | do_bench median, L2 flushed; TFLOP/s over visible pairs",
          flush=True)
    all_rows = []
    for cfg in args.configs.split(","):
        D, H = (int(x) for x in cfg.split(":"))
        for T in (int(x) for x in args.seqlens.split(",")):
            windows = [w for w in (int(x) for x in args.windows.split(",")) if w < T]
            rows = measure(lib, args.batch, H, T, D, dtype, windows, args.only.split(",") if args.only else None,
                           args.backward)
            plain = {r["causal"]: r for r in rows if r["impl"] == "flashbox" and r["variant"] == "plain"}
            same = {(r["causal"], r["variant"].rsplit("window", 1)[1]): r for r in rows
                    if r["variant"].startswith("plain_same_work")}
            for r in rows:
                base = plain.get(r["causal"])
                if r["impl"] == "flashbox" and r.get("tflops") and base and base.get("tflops"):
                    r["vs_plain"] = r["tflops"] / base["tflops"]
                peer = same.get((r["causal"], r["variant"][len("window"):])) if r["variant"].startswith("window") \
                    and "_" not in r["variant"] else None
                if r.get("tflops") and peer and peer.get("tflops"):
                    r["vs_same_work"] = r["tflops"] / peer["tflops"]
                t = f"{r['tflops']:6.0f}" if r.get("tflops") else f"{r.get('status', '-'):>6}"
                ms = f"{r['ms']:8.3f}" if r.get("ms") else f"{'-':>8}"
                vs = f"{r['vs_plain']:5.3f}" if "vs_plain" in r else "     "
                err = f"{r['rel_error_vs_sdpa']:.1e}" if "rel_error_vs_sdpa" in r else ""
                if "vs_same_work" in r:
                    err += f" same-work {r['vs_same_work']:5.3f}"
                print(f"D{D:<4} H{H:<3} T{r['seqlen']:<6} {r['impl']:9} {r['variant']:22} {'causal' if r['causal'] else 'full  '} "
                      f"{ms} ms {t} TFLOP/s  vs plain {vs}  {err:8} {r.get('kernel', r.get('error', ''))}", flush=True)
            all_rows += rows
    doc = {"schema_version": 1, "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "flashbox_version": lib.flashbox_version().decode(),
           "method": "triton.testing.do_bench(warmup=25, rep=100, return_mode='median'), same torch tensors, one process; "
                     "TFLOP/s = 4 B H D * visible pairs / time",
           "rows": all_rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
