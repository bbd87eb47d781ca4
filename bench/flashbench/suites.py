"""The named suites. Each suite is a function (ctx) -> list of (label, thunk); a thunk returns one row
(attention.finish_row's dict). ctx has lib, baseline (a second Library or None), peers (the peer
names to time; None: all), quick, seed, cli (path of the flashbox CLI), bench_dir and machine."""
import json
import os
import random
import subprocess
import sys
import tempfile

from .attention import BOUND, finish_row, flashbox_python, run_case
from .mask_families import mask_families
from .timing import rel_error, time_interleaved


def case(B, Hq, T, D, causal=True, pas="forward", Hkv=None, **extra):
    return dict(batch=B, heads_q=Hq, heads_kv=Hkv or Hq, seqlen=T, head_dim=D, causal=causal, dtype="bf16",
                **{"pass": pas}, **extra)


def label(c):
    text = f"{c['pass']} B{c['batch']} H{c['heads_q']}" + (f"/{c['heads_kv']}" if c['heads_kv'] != c['heads_q'] else "")
    dims = f"D{c['head_dim']}" + (f"/{c['head_dim_v']}" if c.get("head_dim_v") else "")
    text += f" T{c['seqlen']} {dims} {'causal' if c['causal'] else 'non-causal'}"
    for key in ("window", "softcap", "alibi"):
        if c.get(key):
            text += f" {key}" + ("" if c[key] is True else f" {c[key]}")
    return text


def attention_suite(cases):
    def suite(ctx):
        return [(label(c), lambda c=c, i=i: run_case(ctx, c, ctx.seed + i)) for i, c in enumerate(cases)]
    return suite


def _seqlens(quick):
    return [1024] if quick else [512, 1024, 2048, 4096, 8192, 16384]


def forward(ctx, pas="forward"):
    cases = [case(4, 12, T, 64, True, pas) for T in _seqlens(ctx.quick)]
    cases += [case(4, 16, T, 128, True, pas) for T in _seqlens(ctx.quick)]
    cases += [case(4, 16, T, 128, False, pas) for T in ([1024] if ctx.quick else [2048, 8192, 16384])]
    return attention_suite(cases)(ctx)


def backward(ctx):
    return forward(ctx, "backward")


def fa3_paper(ctx):
    """FlashAttention-3's paper setup: 16k tokens per batch (B = 16384 / T), hidden 2048 (H = 2048 / D)."""
    dims, lens = ([128], [1024]) if ctx.quick else ([64, 128, 256], [512, 1024, 2048, 4096, 8192, 16384])
    return attention_suite([case(16384 // T, 2048 // D, T, D, causal, pas) for pas in ("forward", "backward")
                            for D in dims for causal in (False, True) for T in lens])(ctx)


def gqa(ctx):
    groups = [(32, 8)] if ctx.quick else [(32, 8), (32, 4), (16, 1), (64, 8)]
    lens = [2048] if ctx.quick else [2048, 8192]
    return attention_suite([case(4 if T <= 2048 else 1, hq, T, 128, True, pas, Hkv=hk)
                            for pas in ("forward", "backward") for hq, hk in groups for T in lens])(ctx)


def head_dims(ctx):
    dims = [64, 128] if ctx.quick else [32, 64, 80, 96, 128, 160, 192, 256]
    return attention_suite([case(4, max(1, 2048 // D), 4096, D, True, pas) for pas in ("forward", "backward")
                            for D in dims])(ctx)


def head_dim_v(ctx):
    """head_dim_v != head_dim: DeepSeek's prefill (192 / 128), 16k tokens per batch (B = 16384 / T),
    16 heads, forward and backward (cuDNN through SDPA takes head_dim_v != head_dim in both)."""
    lens = [2048] if ctx.quick else [2048, 4096, 8192, 16384]
    return attention_suite([case(16384 // T, 16, T, 192, causal, pas, head_dim_v=128)
                            for pas in ("forward", "backward") for causal in (True, False) for T in lens])(ctx)


def masks(ctx):
    lens = [2048] if ctx.quick else [2048, 8192, 16384]
    mods = [dict(window=(1024, 1024)), dict(softcap=30.0), dict(alibi=True)]
    dims = [128] if ctx.quick else [64, 128]
    cases = [case(4, 16, T, D, causal, pas, **m) for pas in ("forward", "backward") for D in dims for m in mods
             for causal in (True, False) for T in lens if not (m.get("window") and not causal and T < 4096)]
    return attention_suite(cases)(ctx)


def varlen(ctx):
    rng = random.Random(ctx.seed)
    cases = []
    for total, D, H in ([(8192, 128, 16)] if ctx.quick else [(16384, 64, 12), (16384, 128, 16), (65536, 128, 16)]):
        lens, left = [], total
        while left > 0:
            L = min(left, rng.randrange(128, 4097, 8))
            lens.append(L)
            left -= L
        for pas in ("forward", "backward"):
            cases.append(case(len(lens), H, max(lens), D, True, pas, cu_seqlens=lens, tokens=total))
    return [(f"{c['pass']} varlen {len(c['cu_seqlens'])} seqs, {c['tokens']} tokens D{c['head_dim']}",
             lambda c=c, i=i: run_case(ctx, c, ctx.seed + i)) for i, c in enumerate(cases)]


DECODE_SHAPES = [  # batch, cache length, heads_q, heads_kv, head_dim, new queries
    (1, 131072, 32, 8, 128, 1), (1, 32768, 32, 8, 128, 1), (8, 4096, 32, 8, 128, 1), (8, 16384, 32, 8, 128, 1),
    (32, 4096, 32, 8, 128, 1), (64, 2048, 32, 8, 128, 1), (64, 8192, 32, 8, 128, 1), (1, 131072, 32, 8, 128, 4),
    (8, 8192, 32, 8, 128, 4), (1, 131072, 12, 12, 64, 1), (8, 8192, 12, 12, 64, 1), (64, 2048, 12, 12, 64, 4)]


def decode(ctx):
    shapes = [(8, 4096, 32, 8, 128, 1), (1, 32768, 32, 8, 128, 1)] if ctx.quick else DECODE_SHAPES
    rows = [(s, layout) for s in shapes for layout in ("contiguous", "paged")]
    return [(f"decode {layout} B{b} L{L} H{hq}/{hk} D{d} q{sq}",
             lambda s=s, layout=layout, i=i: decode_row(ctx, *s, layout, ctx.seed + i))
            for i, (s, layout) in enumerate(rows) for b, L, hq, hk, d, sq in [s]]


def _sdpa_decode_peers(ctx, q, k, v, fns, notes, outs):
    """The SDPA backends asked for (ctx.peers) on the decode row's q [B, Tq, Hq, D] against k, v
    [B, Hkv, L, D]: each one's callable into fns and its output (as [B, Tq, Hq, D]) into outs, or why
    it declined into notes."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qt, hq, hk = q.transpose(1, 2), q.shape[2], k.shape[1]
    for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)):
        if ctx.peers is not None and name not in ctx.peers:
            continue

        def fn(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, k, v, enable_gqa=hq != hk)
        try:
            outs[name] = fn().transpose(1, 2)
            fns[name] = fn
        except Exception as e:
            notes[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def decode_row(ctx, b, L, hq, hk, d, sq, layout, seed, page=16):
    """flashbox_attention_kvcache on a full bf16 cache (contiguous, or shuffled pages through a block
    table) against SDPA on the same contiguous cache. Bytes: K and V of every visible key, q and o."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=gen)  # noqa: E731
    q, k, v = rnd(b, sq, hq, d), rnd(b, hk, L, d), rnd(b, hk, L, d)
    seqlens = torch.full((b,), L, dtype=torch.int32, device="cuda")
    o = torch.empty_like(q)
    table = None
    if layout == "paged":
        pages = L // page
        table = torch.randperm(b * pages, device="cuda", generator=gen).reshape(b, pages).to(torch.int32)
        paged = lambda t: torch.empty(b * pages, page, hk, d, device="cuda", dtype=t.dtype).index_copy_(  # noqa: E731
            0, table.flatten().long(), t.permute(0, 2, 1, 3).reshape(b * pages, page, hk, d))
        kc, vc = paged(k), paged(v)
    else:
        kc, vc = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)  # [B, L, Hkv, D] views of SDPA's tensors
    work = 2.0 * b * (L * hk + sq * hq) * d * 2
    fns, notes, outs = {}, {}, {}
    for name, lib in [("flashbox", ctx.lib)] + ([("flashbox_baseline", ctx.baseline)] if ctx.baseline else []):
        try:
            fn = lib.kvcache(q, kc, vc, seqlens, o, table)
            fn()
            outs[name] = o.clone()
            fns[name] = fn
        except Exception as e:
            notes[name] = str(e).splitlines()[0][:200]
    _sdpa_decode_peers(ctx, q, k, v, fns, notes, outs)
    times = time_interleaved(fns, ctx.rounds)
    ref = next((n for n in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn") if n in outs), None)
    error = rel_error(outs["flashbox"], outs[ref]) if ref and "flashbox" in outs else None
    shape = dict(batch=b, cache_len=L, heads_q=hq, heads_kv=hk, head_dim=d, seqlen_q=sq, layout=layout,
                 page_size=page if table is not None else None, dtype="bf16", causal=False)
    row = finish_row(shape, seed, "GB/s", work, times, error, ref, notes, ctx.lib.last_kernel(), scale=1e9)
    peak = ctx.machine.get("hbm_peak_bytes_per_s")
    if peak:
        row["fraction_of_peak"] = {n: p * 1e9 / peak for n, p in row["perf"].items()}
    return row


# decode-fp8: GQA 32/8 at head_dim 128, the serving engines' fp8-cache case (issue 48's bar: batch >= 8
# with >= 8k keys and batch 1 x 128k keys), each contiguous and paged (pages of 16 and 256).
DECODE_FP8_SHAPES = [(8, 8192, 32, 8, 128, 1), (32, 8192, 32, 8, 128, 1), (64, 8192, 32, 8, 128, 1),
                     (8, 32768, 32, 8, 128, 1), (1, 131072, 32, 8, 128, 1), (8, 8192, 32, 8, 128, 4),
                     (8, 8192, 32, 8, 64, 1), (8, 8192, 16, 8, 256, 1)]


def decode_fp8(ctx):
    shapes = [(8, 8192, 32, 8, 128, 1)] if ctx.quick else DECODE_FP8_SHAPES
    rows = [(s, layout, page) for s in shapes for layout, page in (("contiguous", 16), ("paged", 16), ("paged", 256))]
    return [(f"decode-fp8 {layout}{' page ' + str(page) if layout == 'paged' else ''} B{b} L{L} H{hq}/{hk} D{d} q{sq}",
             lambda s=s, layout=layout, page=page, i=i: decode_fp8_row(ctx, *s, layout, ctx.seed + i, page))
            for i, (s, layout, page) in enumerate(rows) for b, L, hq, hk, d, sq in [s]]


def decode_fp8_row(ctx, b, L, hq, hk, d, sq, layout, seed, page=16):
    """flashbox_attention_kvcache on a full e4m3 cache (per-tensor descales, powers of two so that the
    dequantized cache is exact in bf16) against the same library on the dequantized bf16 cache
    (`flashbox_bf16_cache`) and SDPA on it. Bytes (`work`): K and V of every visible key at one byte,
    q and o at two, so every implementation's perf is the e4m3 call's bytes over its time (the ratio is
    the speed-up) and fraction_of_peak is flashbox's alone. The error is against SDPA on the
    dequantized cache: the e4m3 rounding itself is not in it (docs/decode.md states that part)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device="cuda", dtype=torch.float32, generator=gen)  # noqa: E731
    k_descale = torch.full((1,), 2.0 ** -5, device="cuda")
    v_descale = torch.full((1,), 2.0 ** -5, device="cuda")
    e4m3 = lambda t: (t * 32).clamp(-448, 448).to(torch.float8_e4m3fn)  # noqa: E731  (values of about 1)
    q = rnd(b, sq, hq, d).to(torch.bfloat16)
    k8, v8 = e4m3(rnd(b, hk, L, d)), e4m3(rnd(b, hk, L, d))
    k, v = (k8.float() * k_descale).to(torch.bfloat16), (v8.float() * v_descale).to(torch.bfloat16)  # exact
    seqlens = torch.full((b,), L, dtype=torch.int32, device="cuda")
    o, o16 = torch.empty_like(q), torch.empty_like(q)
    table = None
    if layout == "paged":
        pages = L // page
        table = torch.randperm(b * pages, device="cuda", generator=gen).reshape(b, pages).to(torch.int32)
        paged = lambda t: torch.empty(b * pages, page, hk, d, device="cuda", dtype=t.dtype).index_copy_(  # noqa: E731
            0, table.flatten().long(), t.permute(0, 2, 1, 3).reshape(b * pages, page, hk, d))
        kc8, vc8 = (paged(t.view(torch.uint8)).view(torch.float8_e4m3fn) for t in (k8, v8))
        kc, vc = paged(k), paged(v)
    else:
        kc8, vc8 = k8.permute(0, 2, 1, 3), v8.permute(0, 2, 1, 3)
        kc, vc = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)  # [B, L, Hkv, D] views of SDPA's tensors
    work = 1.0 * b * L * hk * d * 2 + 2.0 * b * sq * hq * d * 2
    fns, notes, outs = {}, {}, {}
    calls = [("flashbox", ctx.lib, (q, kc8, vc8, seqlens, o, table), dict(k_descale=k_descale, v_descale=v_descale)),
             ("flashbox_bf16_cache", ctx.lib, (q, kc, vc, seqlens, o16, table), {})]
    if ctx.baseline:
        calls.append(("flashbox_baseline", ctx.baseline, (q, kc8, vc8, seqlens, o.clone(), table),
                      dict(k_descale=k_descale, v_descale=v_descale)))
    kernel = None
    for name, lib, args, kw in calls:
        try:
            fn = lib.kvcache(*args, **kw)
            fn()
            if name == "flashbox":
                kernel = lib.last_kernel()
            outs[name] = args[4].clone()
            fns[name] = fn
        except Exception as e:
            notes[name] = str(e).splitlines()[0][:200]
    _sdpa_decode_peers(ctx, q, k, v, fns, notes, outs)
    times = time_interleaved(fns, ctx.rounds)
    ref = next((n for n in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn") if n in outs), None)
    error = rel_error(outs["flashbox"], outs[ref]) if ref and "flashbox" in outs else None
    shape = dict(batch=b, cache_len=L, heads_q=hq, heads_kv=hk, head_dim=d, seqlen_q=sq, layout=layout,
                 page_size=page if table is not None else None, dtype="bf16", cache_dtype="e4m3",
                 descale="per-tensor", causal=False)
    row = finish_row(shape, seed, "GB/s", work, times, error, ref, notes, kernel, scale=1e9)
    peak = ctx.machine.get("hbm_peak_bytes_per_s")
    if peak and "flashbox" in row["perf"]:
        row["fraction_of_peak"] = {"flashbox": row["perf"]["flashbox"] * 1e9 / peak}
    return row


# mla: MLA decode (DeepSeek; issue 47's bar), FlashAttention-3's qv form: 128 query heads against one
# latent KV head, q and k 64 wide, qv and v 512, batch 64, a 4096-key cache in shuffled pages of 64;
# seqlen_q 1 (the bar's bandwidth row) and 2, 4 (causal; more tensor-core work per cache byte).
MLA_SHAPES = [(64, 4096, 128, 1), (64, 4096, 128, 2), (64, 4096, 128, 4)]  # batch, cache length, heads_q, seqlen_q


def mla(ctx):
    shapes = MLA_SHAPES[:1] if ctx.quick else MLA_SHAPES
    return [(f"mla paged B{b} L{L} H{hq}/1 D64+512 q{sq}", lambda s=s, i=i: mla_row(ctx, *s, ctx.seed + i))
            for i, s in enumerate(shapes) for b, L, hq, sq in [s]]


def mla_row(ctx, b, L, hq, sq, seed, page=64):
    """flashbox_attention_kvcache with qv (d 64 + 512, one KV head) on a paged bf16 cache, against an
    fp32 torch reference on the same values (no peer here takes this shape: SDPA's kernels stop at
    head dim 256). perf: bytes read (the cache's k and v, q, qv) and written (o) per second; tflops:
    2 * heads_q * seqlen_q * keys * (576 + 512) per batch entry, per second."""
    import torch
    dk, dv = 64, 512
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=gen)  # noqa: E731
    q, qv, k, v = rnd(b, sq, hq, dk), rnd(b, sq, hq, dv), rnd(b, L, 1, dk), rnd(b, L, 1, dv)
    seqlens = torch.full((b,), L, dtype=torch.int32, device="cuda")
    pages = L // page
    table = torch.randperm(b * pages, device="cuda", generator=gen).reshape(b, pages).to(torch.int32)
    paged = lambda t: torch.empty(b * pages, page, 1, t.shape[3], device="cuda", dtype=t.dtype).index_copy_(  # noqa: E731
        0, table.flatten().long(), t.reshape(b * pages, page, 1, t.shape[3]))
    kc, vc = paged(k), paged(v)
    o = torch.empty(b, sq, hq, dv, device="cuda", dtype=torch.bfloat16)
    fns, notes, outs = {}, {}, {}
    for name, lib in [("flashbox", ctx.lib)] + ([("flashbox_baseline", ctx.baseline)] if ctx.baseline else []):
        try:
            fn = lib.kvcache(q, kc, vc, seqlens, o, table, causal=sq > 1, qv=qv)
            fn()
            outs[name] = o.clone()
            fns[name] = fn
        except Exception as e:
            notes[name] = str(e).splitlines()[0][:200]
    times = time_interleaved(fns, ctx.rounds)
    error = None
    if "flashbox" in outs:  # scores scale * ([q | qv] . [k | v]), causal bottom-right for sq > 1
        s = torch.einsum("bqhd,bkd->bhqk", torch.cat([q, qv], -1).float(), torch.cat([k, v], -1)[:, :, 0].float())
        s = s * (dk + dv) ** -0.5
        if sq > 1:
            i = torch.arange(sq, device="cuda")[:, None]
            j = torch.arange(L, device="cuda")[None, :]
            s = s.masked_fill(j > L - sq + i, float("-inf"))
        ref = torch.einsum("bhqk,bkd->bqhd", s.softmax(-1), v[:, :, 0].float())
        error = rel_error(outs["flashbox"], ref)
        del s, ref
    work = 2.0 * b * L * (dk + dv) + 2.0 * b * sq * hq * (dk + dv + dv)
    flops = 2.0 * b * hq * sq * L * (dk + dv + dv)
    shape = dict(batch=b, cache_len=L, heads_q=hq, heads_kv=1, head_dim=dk, head_dim_v=dv, qv=True, seqlen_q=sq,
                 layout="paged", page_size=page, dtype="bf16", causal=sq > 1)
    row = finish_row(shape, seed, "GB/s", work, times, error, "torch_fp32", notes, ctx.lib.last_kernel(), scale=1e9)
    row["tflops"] = {n: flops / (t * 1e-3) / 1e12 for n, t in times.items() if t}
    peak = ctx.machine.get("hbm_peak_bytes_per_s")
    if peak:
        row["fraction_of_peak"] = {n: p * 1e9 / peak for n, p in row["perf"].items()}
    return row


# fp8: the e4m3 forward (flashbox_attention_forward_ext, dtype e4m3, bf16 o) in FlashAttention-3's paper
# setup (B = 16384 / T, H = 2048 / D), head dims 128 and 256, causal and not (issue 48's bar: >= 1,100
# TFLOP/s at D 256 non-causal T 16k, >= 1,000 at D 128 causal T 16k, >= 1.5x the bf16 forward for
# T >= 2048).
FP8_BOUND = 5e-2  # e4m3 P (3 mantissa bits) against the bf16 forward on the same values


def fp8_forward(ctx):
    dims, lens = ([128], [2048]) if ctx.quick else ([128, 256], [2048, 4096, 8192, 16384])
    rows = [(D, causal, T) for D in dims for causal in (False, True) for T in lens]
    return [(f"fp8 forward B{16384 // T} H{2048 // D} T{T} D{D} {'causal' if causal else 'non-causal'}",
             lambda D=D, causal=causal, T=T, i=i: fp8_forward_row(ctx, 16384 // T, 2048 // D, T, D, causal,
                                                                  ctx.seed + i))
            for i, (D, causal, T) in enumerate(rows)]


def fp8_forward_row(ctx, B, H, T, D, causal, seed):
    """flashbox's e4m3 forward (per-tensor descales 2^-5, so the dequantized inputs are exact in bf16)
    against flashbox's own bf16 forward on those dequantized values (`flashbox_bf16`) and SDPA's bf16
    backends on them; the error is against flashbox_bf16 (the e4m3 rounding of P, not of the inputs).
    Tensors [B, T, H, D]; FLOPs as the forward suite's (causal: half)."""
    import torch
    from . import abi
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda: torch.randn(B, T, H, D, device="cuda", dtype=torch.float32, generator=gen)  # noqa: E731
    descale = torch.full((1,), 2.0 ** -5, device="cuda")
    e4m3 = lambda t: (t * 32).clamp(-448, 448).to(torch.float8_e4m3fn)  # noqa: E731
    q8, k8, v8 = e4m3(rnd()), e4m3(rnd()), e4m3(rnd())
    q, k, v = ((t.float() * descale).to(torch.bfloat16) for t in (q8, k8, v8))  # exact
    o8, o16 = (torch.empty(B, T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lse8, lse16 = (torch.empty(B, H, T, device="cuda", dtype=torch.float32) for _ in range(2))
    fns, notes, outs = {}, {}, {}
    kernel = None
    keep = []
    calls = [("flashbox", ctx.lib, True), ("flashbox_bf16", ctx.lib, False)]
    if ctx.baseline:
        calls.append(("flashbox_baseline", ctx.baseline, True))
    for name, lib, fp8 in calls:
        try:
            o, lse = (o8.clone(), lse8) if name == "flashbox_baseline" else ((o8, lse8) if fp8 else (o16, lse16))
            a = lib.attention_args(q, k, v, o, lse, causal, layout="bthd")
            if fp8:
                a.dtype = abi.FLOAT8_E4M3
                a.q, a.k, a.v = q8.data_ptr(), k8.data_ptr(), v8.data_ptr()
                e = lib.ext()
                e.out_dtype = abi.BF16
                e.q_descale = e.k_descale = e.v_descale = descale.data_ptr()
                fn = lib.forward(a, e)
            else:
                fn = lib.forward(a)
            keep.append((a, o))
            fn()
            if name == "flashbox":
                kernel = lib.last_kernel()
            outs[name] = o.clone()
            fns[name] = fn
        except Exception as e:
            notes[name] = str(e).splitlines()[0][:200]
    case = dict(batch=B, heads_q=H, heads_kv=H, seqlen=T, head_dim=D, causal=causal, dtype="e4m3", out_dtype="bf16",
                descale="per-tensor", **{"pass": "forward"})
    from .attention import flops, peer_fns
    qb, kb, vb = (t.transpose(1, 2) for t in (q, k, v))  # SDPA's [B, H, T, D] views
    for name, peer in peer_fns(case, qb, kb, vb, ctx.peers or {"sdpa_cudnn"}).items():
        try:
            fn = lambda peer=peer: peer(qb, kb, vb)  # noqa: E731
            outs[name] = fn().transpose(1, 2)
            fns[name] = fn
        except Exception as e:
            notes[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    times = time_interleaved(fns, ctx.rounds)
    ref = "flashbox_bf16" if "flashbox_bf16" in outs else None
    error = rel_error(outs["flashbox"], outs[ref]) if ref and "flashbox" in outs else None
    row = finish_row(case, seed, "TFLOP/s", flops(case), times, error, ref, notes, kernel)
    row["error_bound"] = FP8_BOUND
    if row["status"] == "fail" and error is not None and error <= FP8_BOUND:
        row["status"] = "ok"
    del keep
    return row


def _cli(ctx, *args, timeout=1800):
    out = subprocess.run([ctx.cli, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])}: exit {out.returncode}: {out.stderr.strip()[-300:]}")
    return out.stdout


def gpt2_eval(ctx):
    """`flashbox gpt2 eval` of seeded 124M weights on random tokens: flash against naive attention."""
    count = 16384 if ctx.quick else 262144
    return [(f"gpt2 eval 124M {count} tokens", lambda: gpt2_eval_row(ctx, count))]


def gpt2_eval_row(ctx, count):
    shape = dict(model="gpt2-124M", tokens=count, seqlen=1024, batch=16)
    if not ctx.cli or not os.path.exists(ctx.cli):
        return finish_row(shape, ctx.seed, "tokens/s", count, {}, None, None, {"flashbox": "no CLI (--cli)"})
    with tempfile.TemporaryDirectory() as tmp:
        tokens = write_tokens(os.path.join(tmp, "tokens.bin"), count + 1, ctx.seed)
        doc = json.loads(_cli(ctx, "gpt2", "eval", "--init", "gpt2", "--seed", str(ctx.seed), "--tokens", tokens,
                              "--count", str(count), "--impl", "naive,flash", "--device", "cuda", "--json"))
    rows = {r["impl"]: r for r in doc["rows"]}
    times = {("flashbox" if impl == "flash" else "flashbox_naive"): r["seconds"] * 1e3 for impl, r in rows.items()
             if r.get("seconds")}
    fb, nv = rows.get("flash", {}), rows.get("naive", {})
    error = abs(fb["loss"] - nv["loss"]) / abs(nv["loss"]) if fb.get("loss") and nv.get("loss") else None
    return finish_row(shape, ctx.seed, "tokens/s", doc["tokens"], times, error, "flashbox_naive", {}, scale=1.0)


def gpt2_train(ctx):
    """Issue 46's shape: B16 x T1024 (--quick: B4, 10 steps)."""
    steps, batch = (10, 4) if ctx.quick else (40, 16)
    return [(f"gpt2 train 124M B{batch} T1024 {steps} steps", lambda: gpt2_train_row(ctx, steps, batch))]


def gpt2_train_row(ctx, steps, batch, seqlen=1024):
    """`flashbox gpt2 train` against a torch.compile'd PyTorch step (bench/gpt2_train_torch.py bench):
    tokens/s of the timed steps; the row fails when flashbox's last loss is not finite. flashbox runs
    with --deterministic 0 (atomic dQ sums, tuned cuBLASLt algorithms), as PyTorch's step runs by
    default (cuDNN's attention backward and cuBLAS are not bitwise reproducible either)."""
    shape = dict(model="gpt2-124M", batch=batch, seqlen=seqlen, steps=steps)
    times, notes, error = {}, {}, None
    tokens_per_step = batch * seqlen
    with tempfile.TemporaryDirectory() as tmp:
        if ctx.cli and os.path.exists(ctx.cli):
            try:
                tokens = write_tokens(os.path.join(tmp, "train.bin"), (steps + 2) * tokens_per_step + 1, ctx.seed)
                log = os.path.join(tmp, "log.jsonl")
                _cli(ctx, "gpt2", "train", "--config", "gpt2", "--seed", str(ctx.seed), "--train", tokens, "--batch",
                     str(batch), "--seqlen", str(seqlen), "--total-batch", str(tokens_per_step), "--steps", str(steps),
                     "--deterministic", "0", "--log", log, "--quiet")
                events = [json.loads(line) for line in open(log)]
                summary = next(e for e in events if e["event"] == "summary")
                times["flashbox"] = tokens_per_step / summary["tokens_per_second"] * 1e3
                losses = [e["loss"] for e in events if e["event"] == "step"]
                error = 0.0 if losses and losses[-1] == losses[-1] and abs(losses[-1]) < 1e9 else float("inf")
            except Exception as e:
                notes["flashbox"] = str(e)[:300]
        else:
            notes["flashbox"] = "no CLI (--cli)"
        out = os.path.join(tmp, "torch.json")
        script = os.path.join(ctx.bench_dir, "gpt2_train_torch.py")
        r = subprocess.run([sys.executable, script, "bench", "--batch", str(batch), "--seqlen", str(seqlen),
                            "--steps", str(steps), "--json", out], capture_output=True, text=True, timeout=1800)
        if r.returncode == 0:
            times["torch_compile"] = json.load(open(out))["ms_per_step"]
        else:
            notes["torch_compile"] = r.stderr.strip()[-300:]
    return finish_row(shape, ctx.seed, "tokens/s", tokens_per_step, times, error, None, notes, scale=1.0)


def write_tokens(path, n, seed):
    """An llm.c token shard (int32[256] header: magic 20240520, version 1, count; uint16 tokens) of
    n tokens drawn uniformly from GPT-2's vocabulary."""
    import numpy as np
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, n)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.random.default_rng(seed).integers(0, 50257, n, dtype=np.uint16).tobytes())
    return path


# ---- llama-e2e: a Llama-shaped model in Hugging Face transformers, flashbox against sdpa ------------

LLAMA_1B = dict(hidden=2048, layers=16, heads_q=32, heads_kv=8, head_dim=64, intermediate=8192, vocab=32000,
                batch=8, prefill=8192, decode_steps=256)
LLAMA_TINY = dict(hidden=256, layers=2, heads_q=4, heads_kv=2, head_dim=64, intermediate=512, vocab=1024,
                  batch=2, prefill=512, decode_steps=16)


def llama_e2e(ctx):
    """transformers' LlamaForCausalLM built from a config (random weights, bf16; --quick: LLAMA_TINY) with
    attn_implementation "flashbox" and "sdpa", the same weights, in this process: prefill of `prefill`
    tokens into a static cache, then `decode_steps` greedy steps. Three rows: prefill (tokens/s of the
    prompt), decode (ms per step; tokens/s = batch / step time) and total (prefill + every step; tokens/s of
    the generated tokens)."""
    m = dict(LLAMA_TINY if ctx.quick else LLAMA_1B)
    name = "llama-tiny" if ctx.quick else "llama-1b"
    done = {}

    def row(phase):
        if "rows" not in done:
            done["rows"] = llama_e2e_rows(ctx, m, name)
        return done["rows"][phase]

    text = f"{name} B{m['batch']} prefill {m['prefill']} + {m['decode_steps']} decode steps"
    return [(f"{text}: {phase}", lambda phase=phase: row(phase)) for phase in ("prefill", "decode", "total")]


def _tensors_of(obj, seen=None, depth=0):
    """Every tensor a transformers cache object holds (keys, values, length counters), found through its
    attributes: the state to zero between runs, whatever the cache's layout in this transformers."""
    import torch
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        if id(obj) in seen:
            return []
        seen.add(id(obj))
        return [obj]
    if depth > 4 or isinstance(obj, (str, bytes, int, float, bool, type(None))) or hasattr(obj, "to_json_string"):
        return []   # (configs: to_json_string)
    items = list(obj.values()) if isinstance(obj, dict) else list(obj) if isinstance(obj, (list, tuple)) else \
        list(vars(obj).values()) if hasattr(obj, "__dict__") else []
    return [t for x in items for t in _tensors_of(x, seen, depth + 1)]


# No "flash" in the name: transformers 5 takes such names for FlashAttention kernels to load.
EFFICIENT_IMPL = "bench_sdpa_efficient"


def _register_efficient_attention():
    """SDPA's memory-efficient backend as a transformers attention function: the second backend of the
    llama-e2e error bound. transformers hands SDPA grouped K/V heads, which the memory-efficient kernel
    refuses; here they are repeated first. The 4-D mask transformers built when it gives one, else causal
    over a prompt written from cache slot 0 (query i sees slots 0..i: the prefill's case, its only use)."""
    import torch
    import transformers
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def efficient(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kw):
        group = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
        mask = None
        if attention_mask is not None and attention_mask.dim() == 4:
            mask = attention_mask[:, :, :, :key.shape[-2]]
        elif query.shape[-2] > 1:
            Tq, Tk = query.shape[-2], key.shape[-2]
            mask = torch.arange(Tk, device=query.device)[None, :] <= torch.arange(Tq, device=query.device)[:, None]
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
        return o.transpose(1, 2).contiguous(), None

    transformers.AttentionInterface.register(EFFICIENT_IMPL, efficient)
    try:  # the mask sdpa gets, for the new name too (transformers with masking_utils)
        from transformers.masking_utils import sdpa_mask
        transformers.AttentionMaskInterface.register(EFFICIENT_IMPL, sdpa_mask)
    except (ImportError, AttributeError):
        pass


class _E2E:
    """One attention implementation on the shared model: its static cache, the prefill, and one decode
    step (token in, greedy token out, positions advanced, all on the device) captured in a CUDA graph."""

    def __init__(self, model, impl, ids, steps):
        import inspect
        import torch
        import transformers
        self.model, self.impl, self.ids, self.steps = model, impl, ids, steps
        B, T = ids.shape
        # capacity a multiple of 64: SDPA's memory-efficient kernel takes the explicit mask transformers
        # builds over every cache slot only with an aligned last dimension (else it falls back to math)
        capacity = (T + steps + 63) // 64 * 64
        try:
            self.cache = transformers.StaticCache(config=model.config, max_cache_len=capacity)
        except TypeError:  # 4.5x
            self.cache = transformers.StaticCache(config=model.config, max_batch_size=B, max_cache_len=capacity,
                                                  device=ids.device, dtype=model.dtype)
        params = inspect.signature(model.forward).parameters
        self.prefill_kw = dict(input_ids=ids, past_key_values=self.cache, use_cache=True)
        if "logits_to_keep" in params:
            self.prefill_kw["logits_to_keep"] = 1
        self.tok = torch.zeros(B, 1, dtype=torch.long, device="cuda")
        self.pos = torch.zeros(B, 1, dtype=torch.long, device="cuda")
        self.generated = torch.zeros(B, steps, dtype=torch.long, device="cuda")
        self.step_kw = dict(input_ids=self.tok, position_ids=self.pos, past_key_values=self.cache, use_cache=True)
        if "cache_position" in params:  # transformers that place new keys by cache_position
            self.prefill_kw["cache_position"] = torch.arange(T, device="cuda")
            self.cache_position = torch.zeros(1, dtype=torch.long, device="cuda")
            self.step_kw["cache_position"] = self.cache_position
        self.graph = None

    def use(self):
        if hasattr(self.model, "set_attn_implementation"):
            self.model.set_attn_implementation(self.impl)
        else:
            self.model.config._attn_implementation = self.impl

    def reset(self):
        """This implementation on the model, and an empty cache (every tensor of it zeroed: a fresh static
        cache, its length counters 0)."""
        self.use()
        for t in _tensors_of(self.cache):
            t.zero_()

    def prefill(self):
        """The prompt into the (reset) cache; the decode inputs set from it. Returns the last logits."""
        import torch
        with torch.no_grad():
            logits = self.model(**self.prefill_kw).logits[:, -1]
        self.tok.copy_(logits.argmax(-1, keepdim=True))
        self.pos.fill_(self.ids.shape[1])
        if "cache_position" in self.step_kw:
            self.cache_position.fill_(self.ids.shape[1])
        return logits.float()

    def step(self):
        import torch
        with torch.no_grad():
            logits = self.model(**self.step_kw).logits[:, -1]
        nxt = logits.argmax(-1, keepdim=True)
        self.generated.copy_(torch.cat([self.generated[:, 1:], nxt], 1))   # the last `steps` tokens
        self.tok.copy_(nxt)
        self.pos.add_(1)
        if "cache_position" in self.step_kw:
            self.cache_position.add_(1)

    def capture(self):
        """Warm-up steps on a side stream, a fresh prefill, then one step captured."""
        import torch
        self.reset()
        self.prefill()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.reset()
        self.prefill()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step()
        self.graph = graph

    def decode(self):
        for _ in range(self.steps):
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step()


def _elapsed_ms(fn):
    import torch
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    out = fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop), out


def llama_e2e_rows(ctx, m, name):
    import statistics
    import torch
    shape = dict(model=name, **m, dtype="bf16", cache="static")
    rows = {}
    try:
        import transformers
        flashbox_python(ctx)
        import flashbox.integrations.transformers  # noqa: F401  (registers "flashbox")
    except Exception as e:
        notes = {"flashbox": f"{type(e).__name__}: {str(e)[:250]}"}
        return {p: finish_row({**shape, "phase": p}, ctx.seed, "tokens/s", 0, {}, None, None, notes, scale=1.0)
                for p in ("prefill", "decode", "total")}
    cfg = transformers.LlamaConfig(vocab_size=m["vocab"], hidden_size=m["hidden"], intermediate_size=m["intermediate"],
                                   num_hidden_layers=m["layers"], num_attention_heads=m["heads_q"],
                                   num_key_value_heads=m["heads_kv"], head_dim=m["head_dim"],
                                   max_position_embeddings=m["prefill"] + m["decode_steps"] + 64,
                                   tie_word_embeddings=False, attention_dropout=0.0)
    torch.manual_seed(ctx.seed)
    with torch.device("cuda"):
        try:
            model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
        except TypeError:  # 4.5x: torch_dtype
            model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                                  torch_dtype=torch.bfloat16)
    model = model.to("cuda", torch.bfloat16).eval()
    gen = torch.Generator(device="cuda").manual_seed(ctx.seed)
    ids = torch.randint(3, m["vocab"], (m["batch"], m["prefill"]), device="cuda", generator=gen)
    runs = {impl: _E2E(model, impl, ids, m["decode_steps"]) for impl in ("flashbox", "sdpa")}
    notes = {}
    graphs = True
    for impl, run in runs.items():
        try:
            run.capture()
        except Exception as e:  # then both run their steps eagerly
            graphs = False
            notes[impl] = f"CUDA graph capture failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    if not graphs:
        for run in runs.values():
            run.graph = None
    how = "decode steps replayed from a CUDA graph (one captured step each)" if graphs else \
        "decode steps eager (capture failed for one implementation, so neither uses a graph)"
    prefill_ms, decode_ms, first = {n: [] for n in runs}, {n: [] for n in runs}, {}
    for r in range(max(1, ctx.rounds) + 1):     # round 0 warms up (cuBLAS, allocator); rounds alternate the order
        for impl in (list(runs) if r % 2 else list(runs)[::-1]):
            run = runs[impl]
            run.reset()
            t, logits = _elapsed_ms(run.prefill)
            first[impl] = logits
            d, _ = _elapsed_ms(run.decode)
            if r:
                prefill_ms[impl].append(t)
                decode_ms[impl].append(d)
    pre = {n: statistics.median(v) for n, v in prefill_ms.items()}
    step = {n: statistics.median(v) / m["decode_steps"] for n, v in decode_ms.items()}
    total = {n: pre[n] + step[n] * m["decode_steps"] for n in runs}
    error = rel_error(first["flashbox"], first["sdpa"])   # the prefill's last-position logits
    # The bound is the rule: flashbox may differ from sdpa by as much as two of SDPA's own
    # backends differ on the same model (here cuDNN/flash, as chosen, against memory-efficient; eager
    # would hold B x H x T^2 scores per layer): a deep bf16 model's logits move by more than one
    # attention call's 2e-2, whichever kernel runs.
    bound, floor_note = BOUND, ""
    try:
        _register_efficient_attention()
        alt_impl = _E2E(model, EFFICIENT_IMPL, ids, 1)
        alt_impl.reset()
        alt = alt_impl.prefill()
        del alt_impl
        floor = rel_error(alt, first["sdpa"].float())
        bound = max(BOUND, floor)
        floor_note = f"; sdpa (memory-efficient, K/V heads repeated) vs sdpa: {floor:.2e}, the error bound"
    except Exception as e:  # no efficient backend for this shape: the plain bound stays
        floor_note = f"; no second SDPA backend ({type(e).__name__}: {str(e).splitlines()[0][:120]}): bound {BOUND}"
    fb_tok, ref_tok = runs["flashbox"].generated, runs["sdpa"].generated
    differ = (fb_tok != ref_tok).any(0).nonzero()
    same = int(differ[0]) if differ.numel() else m["decode_steps"]
    note = (f"{how}; medians of {max(1, ctx.rounds)} rounds (a round: prefill then every step, flashbox and sdpa "
            f"alternating first); error: prefill logits vs sdpa's; greedy tokens equal to sdpa's for the first "
            f"{same} of {m['decode_steps']} steps (random weights: near ties part them){floor_note}")
    notes = {**notes, "flashbox": note}
    B, T, S = m["batch"], m["prefill"], m["decode_steps"]
    rows["prefill"] = finish_row({**shape, "phase": "prefill"}, ctx.seed, "tokens/s", B * T, pre, error, "sdpa",
                                 notes, scale=1.0, bound=bound)
    rows["decode"] = finish_row({**shape, "phase": "decode"}, ctx.seed, "tokens/s", B, step, error, "sdpa", notes,
                                scale=1.0, bound=bound)
    rows["total"] = finish_row({**shape, "phase": "total"}, ctx.seed, "tokens/s", B * S, total, error, "sdpa", notes,
                               scale=1.0, bound=bound)
    del runs, model
    torch.cuda.empty_cache()
    return rows


SUITES = {"forward": forward, "backward": backward, "varlen": varlen, "masks": masks, "mask-families": mask_families,
          "decode": decode, "mla": mla,
          "decode-fp8": decode_fp8, "fp8": fp8_forward, "gqa": gqa, "head-dims": head_dims, "head-dim-v": head_dim_v, "gpt2-eval": gpt2_eval,
          "gpt2-train": gpt2_train, "fa3-paper": fa3_paper, "llama-e2e": llama_e2e}
