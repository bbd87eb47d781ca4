"""flashbox.flex_attention on the GPU against torch's FlexAttention and an fp64 dense reference.

Same BlockMask (torch's create_block_mask) for both; forward (out, lse) and backward (dq, dk, dv) for
document masking, causal, sliding window, prefix-LM with per-batch prefix lengths, GQA, rows that see no
key, T not a multiple of 128; torch.compile(fullgraph=True) of a function calling flashbox.flex_attention;
the refusals (score_mod, a mask_mod on CPU that is no built-in family). The masks that are built-in
families (causal, document, sliding_window, prefix_lm) run as them (test_flex_families_cuda.py checks the
route). Needs torch >= 2.5 with FlexAttention, a CUDA GPU and a
libflashbox with CUDA and NVRTC; skips with the reason otherwise.
"""

import math

import pytest

torch = pytest.importorskip("torch", minversion="2.5", reason="flashbox.flex_attention needs torch >= 2.5")
fa = pytest.importorskip("torch.nn.attention.flex_attention", reason="torch has no FlexAttention")

import pysupport as S  # noqa: E402
from pysupport import _lib, flashbox  # noqa: E402
from flashbox.flex import flex_attention  # noqa: E402


def _have_cuda() -> bool:
    try:
        return torch.cuda.is_available() and flashbox.cuda_device_count() > 0
    except (AttributeError, _lib.LibraryNotFoundError):
        return False


needs_cuda = pytest.mark.skipif(not _have_cuda(), reason="no CUDA GPU visible to torch, or libflashbox built "
                                                          "without CUDA")
DEV = "cuda"


def run(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except _lib.FlashboxError as e:
        if e.code == _lib.ErrorCode.UNSUPPORTED_IMPL and "NVRTC" in e.message:
            S.skip(f"no NVRTC: {e.message}")
        raise


# ---- masks (FlexAttention mask_mods over captured tensors) -------------------------------------------

def make_mask(name, B, T, Tk, device=DEV):
    g = torch.Generator().manual_seed(7)
    if name == "causal":
        def mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
    elif name == "document":
        cuts = torch.sort(torch.randint(1, T, (B, 5), generator=g), dim=1).values
        ids = torch.zeros(B, T, dtype=torch.int32)
        for b in range(B):
            for c in cuts[b].tolist():
                ids[b, c:] += 1
        doc = ids.to(device)

        def mod(b, h, q_idx, kv_idx):
            return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)
    elif name == "sliding_window":
        def mod(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx <= 100)
    elif name == "prefix_lm":
        prefix = torch.tensor([40, 170][:B] + [0] * max(0, B - 2), dtype=torch.int32, device=device)

        def mod(b, h, q_idx, kv_idx):
            return (kv_idx < prefix[b]) | (q_idx >= kv_idx)
    elif name == "empty_rows":   # queries 0..49 see no key
        def mod(b, h, q_idx, kv_idx):
            return (q_idx >= 50) & (kv_idx <= q_idx)
    elif name == "per_head":
        def mod(b, h, q_idx, kv_idx):
            return (q_idx - kv_idx) % (h + 2) == 0
    else:
        raise ValueError(name)
    return mod


MASKS = ["causal", "document", "sliding_window", "prefix_lm", "empty_rows", "per_head"]


def dense_reference(q, k, v, mod, scale=None):
    """fp64 attention under the mask mod evaluated on the whole grid."""
    B, Hq, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    dev = q.device
    b = torch.arange(B, device=dev).view(-1, 1, 1, 1)
    h = torch.arange(Hq, device=dev).view(1, -1, 1, 1)
    qi = torch.arange(Tq, device=dev).view(1, 1, -1, 1)
    ki = torch.arange(Tk, device=dev).view(1, 1, 1, -1)
    vis = mod(b, h, qi, ki).expand(B, Hq, Tq, Tk)
    q, k, v = q.double(), k.double(), v.double()
    k = k.repeat_interleave(Hq // Hkv, dim=1)
    v = v.repeat_interleave(Hq // Hkv, dim=1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * (scale if scale is not None else 1 / math.sqrt(D))
    s = s.masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("bhqk,bhkd->bhqd", p, v), lse


def _inputs(B, Hq, Hkv, Tq, Tk, D, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn(B, Hq, Tq, D, device=DEV, dtype=dtype, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, Tk, D, device=DEV, dtype=dtype, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, Tk, D, device=DEV, dtype=dtype, generator=g).requires_grad_()
    return q, k, v


def _close(got, want, ref, name):
    """flashbox vs the fp64 reference within twice FlexAttention's own error (bf16 rules) + slack."""
    err = (got.double() - ref).abs().max().item()
    ref_err = (want.double() - ref).abs().max().item()
    assert err <= 2 * ref_err + 1e-2, f"{name}: flashbox error {err:.3e}, FlexAttention's {ref_err:.3e}"


SHAPES = [
    # B, Hq, Hkv, Tq, Tk, D
    (2, 4, 4, 256, 256, 64),
    (1, 8, 2, 300, 300, 128),   # GQA, T not a multiple of 128
]


@needs_cuda
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}_H{}-{}_T{}x{}_D{}".format(*s))
@pytest.mark.parametrize("mask", MASKS)
def test_forward_backward_vs_flex_and_fp64(mask, shape):
    B, Hq, Hkv, Tq, Tk, D = shape
    mod = make_mask(mask, B, Tq, Tk)
    bm_h = Hq if mask == "per_head" else None
    bm_b = B if mask in ("document", "prefix_lm") else None
    block_mask = fa.create_block_mask(mod, bm_b, bm_h, Tq, Tk, device=DEV)
    q, k, v = _inputs(B, Hq, Hkv, Tq, Tk, D)
    gqa = Hq != Hkv
    out, lse = run(flex_attention, q, k, v, block_mask=block_mask, enable_gqa=gqa, return_lse=True)
    flex = torch.compile(fa.flex_attention)
    ref_out_flex, ref_lse_flex = flex(q, k, v, block_mask=block_mask, enable_gqa=gqa, return_lse=True)
    ref_out, ref_lse = dense_reference(q, k, v, mod)
    assert out.shape == (B, Hq, Tq, D) and lse.shape == (B, Hq, Tq) and lse.dtype == torch.float32
    _close(out, ref_out_flex, ref_out.detach(), "out")
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite), "rows that see no key: lse -inf"
    assert (out[~finite] == 0).all(), "rows that see no key: out 0"
    torch.testing.assert_close(lse[finite].double(), ref_lse[finite].detach(), atol=2e-2, rtol=0)

    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    flex_grads = torch.autograd.grad(ref_out_flex, (q, k, v), dout)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), dout.double())
    for name, gg, fg, rg in zip(("dq", "dk", "dv"), grads, flex_grads, ref_grads):
        _close(gg, fg, rg, name)
    if mask == "empty_rows":
        assert (grads[0][:, :, :50] == 0).all()


@needs_cuda
def test_no_block_mask_and_noop_mask():
    q, k, v = _inputs(1, 2, 2, 200, 200, 64)
    out = run(flex_attention, q, k, v)
    ref, _ = dense_reference(q, k, v, lambda b, h, qi, ki: qi >= -1)
    _close(out, fa.flex_attention(q, k, v), ref.detach(), "out")
    bm = fa.create_block_mask(fa.noop_mask, None, None, 200, 200, device=DEV)
    out2 = run(flex_attention, q, k, v, block_mask=bm)
    torch.testing.assert_close(out2, out, atol=2e-2, rtol=0)


@needs_cuda
def test_torch_compile_fullgraph():
    B, H, T, D = 2, 4, 384, 64
    mod = make_mask("document", B, T, T)
    bm = fa.create_block_mask(mod, B, None, T, T, device=DEV)
    q, k, v = _inputs(B, H, H, T, T, D)

    def f(q, k, v):
        o, lse = flashbox.flex_attention(q, k, v, block_mask=bm, return_lse=True)
        return (o.float() * 2).sum() + lse.nan_to_num(0, neginf=0).sum() * 0

    compiled = torch.compile(f, fullgraph=True)
    loss = run(compiled, q, k, v)
    loss.backward()
    gq = q.grad.clone()
    q.grad = None
    f(q, k, v).backward()
    torch.testing.assert_close(loss, f(q, k, v), atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(gq, q.grad, atol=1e-2, rtol=1e-2)


@needs_cuda
def test_refusals():
    q, k, v = _inputs(1, 2, 2, 128, 128, 64)
    with pytest.raises(NotImplementedError, match="score_mod is not supported by flashbox's kernels yet"):
        flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s * 2)
    mod = make_mask("per_head", 1, 128, 128)      # not a built-in family (those run on the CPU too)
    bm = fa.create_block_mask(mod, None, 2, 128, 128, device="cpu")
    qc, kc, vc = (t.detach().float().cpu() for t in (q, k, v))
    with pytest.raises(NotImplementedError, match="only on CUDA"):
        run(flex_attention, qc, kc, vc, block_mask=bm)
    mod = make_mask("causal", 1, 128, 128)
    with pytest.raises(ValueError, match="enable_gqa"):
        flex_attention(q, k[:, :1], v[:, :1])
    with pytest.raises(ValueError, match="sequence lengths"):
        flex_attention(q[:, :, :64], k, v, block_mask=fa.create_block_mask(mod, None, None, 128, 128, device=DEV))
