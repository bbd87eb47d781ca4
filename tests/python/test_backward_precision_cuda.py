"""The backward's (and forward's) precision on the GPU, against SDPA's on the same inputs.

For the attention shapes of test_transformers_backend.py's models (GQA, head_dim 64 and 128, causal,
sliding windows, left-padded batches as varlen and the same lengths dense), the output and dq, dk, dv
of flashbox.flash_attn (bf16) and of torch's scaled_dot_product_attention (bf16, the backend torch
picks) are each compared with fp64 attention on the same inputs: relative error ||x - ref|| / ||ref||.
flashbox's must stay below 1e-2 (the project's bf16 rule) and within 1.25x SDPA's plus 1e-4: as
precise as what a model would otherwise run. The failure message carries every number and the
kernels that ran. Inputs: fresh normal q, k, v, dO with a few outliers, seed printed.
Needs torch >= 2.4, a CUDA GPU and a libflashbox with CUDA; skips with the reason otherwise.
"""

import math

import pytest

torch = pytest.importorskip("torch", minversion="2.4", reason="flashbox.flash_attn needs torch >= 2.4")

import pysupport as S  # noqa: E402,F401  (puts python/ on sys.path)
import flashbox  # noqa: E402
from flashbox.flash_attn import flash_attn_func, flash_attn_varlen_func  # noqa: E402
from test_flex_attention import needs_cuda  # noqa: E402

SEED = 20261207
TOLERANCE = 1.25      # flashbox's error at most this multiple of SDPA's (plus FLOOR)
FLOOR = 1e-4

# name, heads_q, heads_kv, head_dim, sequence length, window (left), left padding per row
CASES = [
    ("llama", 4, 1, 128, 4096, None, (0, 700)),
    ("qwen2", 8, 2, 64, 2048, None, (0, 300)),
    ("mistral", 8, 2, 64, 2048, 512, (0, 300)),
    ("gemma2-local", 8, 2, 64, 1536, 512, (0, 257)),
]


def _rel(got, want):
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


def _inputs(lengths, hq, hk, d, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    total = sum(lengths)

    def t(h):
        x = torch.randn(total, h, d, device="cuda", generator=g)
        x.view(-1)[torch.randint(0, x.numel(), (8,), device="cuda", generator=g)] *= 8.0   # outliers
        return x.to(torch.bfloat16)

    return t(hq), t(hk), t(hk), t(hq)


def _sdpa_grads(q, k, v, dout, lengths, window, dtype):
    """Per sequence, torch SDPA in `dtype` with a causal (and window) mask: o, dq, dk, dv in [total, h, d]."""
    grads = [[], [], [], []]
    start = 0
    for n in lengths:
        if n == 0:
            continue
        qs, ks, vs = (x[start:start + n].to(dtype).transpose(0, 1).unsqueeze(0).requires_grad_() for x in (q, k, v))
        mask = None
        if window is not None:
            i = torch.arange(n, device="cuda")
            mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] <= window)
        # K/V heads repeated rather than enable_gqa: SDPA's fused backends that take a mask do not take
        # enable_gqa, and the math backend it would fall back to is not the peer meant here.
        group = qs.shape[1] // ks.shape[1]
        kr, vr = (x.repeat_interleave(group, dim=1) for x in (ks, vs))
        o = torch.nn.functional.scaled_dot_product_attention(qs, kr, vr, attn_mask=mask, is_causal=mask is None)
        do = dout[start:start + n].to(dtype).transpose(0, 1).unsqueeze(0)
        grads[0].append(o.detach()[0].transpose(0, 1))
        for acc, gr in zip(grads[1:], torch.autograd.grad(o, (qs, ks, vs), do)):
            acc.append(gr[0].transpose(0, 1))
        start += n
    return [torch.cat(x) for x in grads]


@needs_cuda
@pytest.mark.parametrize("layout", ["varlen", "dense"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradients_as_precise_as_sdpa(case, layout):
    name, hq, hk, d, T, window, pads = case
    lengths = [T - p for p in pads] if layout == "varlen" else [T] * len(pads)
    seed = SEED + sum(map(ord, name + layout))
    print(f"{name} {layout}: seed {seed}")
    q, k, v, dout = _inputs(lengths, hq, hk, d, seed)
    ref = _sdpa_grads(q, k, v, dout, lengths, window, torch.float64)
    peer = _sdpa_grads(q, k, v, dout, lengths, window, torch.bfloat16)

    qf, kf, vf = (x.clone().requires_grad_() for x in (q, k, v))
    win = (-1, -1) if window is None else (window, 0)
    if layout == "varlen":
        cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device="cuda")
        o = flash_attn_varlen_func(qf, kf, vf, cu, cu, max(lengths), max(lengths), causal=True, window_size=win)
    else:
        B = len(lengths)
        o = flash_attn_func(*(x.view(B, T, *x.shape[1:]) for x in (qf, kf, vf)), causal=True, window_size=win)
        o = o.reshape(B * T, hq, d)
    kernel = flashbox.last_kernel()
    got = torch.autograd.grad(o, (qf, kf, vf), dout)
    bwd_kernel = flashbox.last_kernel()

    rows = []
    for label, g, p, r in zip(("o", "dq", "dk", "dv"), (o.detach(),) + tuple(got), peer, ref):
        e_fb, e_sdpa = _rel(g, r), _rel(p, r)
        assert not math.isnan(e_fb), f"{label}: NaN"
        rows.append((label, e_fb, e_sdpa))
    report = ", ".join(f"{lbl} flashbox {a:.3e} sdpa {b:.3e}" for lbl, a, b in rows)
    report += f" (forward {kernel}, backward {bwd_kernel}, seed {seed})"
    print(report)
    for label, e_fb, e_sdpa in rows:
        assert e_fb < 1e-2, f"{name} {layout} {label}: {report}"
        assert e_fb <= TOLERANCE * e_sdpa + FLOOR, f"{name} {layout} {label}: {report}"
