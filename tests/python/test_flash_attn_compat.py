"""flashbox.flash_attn (FlashAttention-2's public functions) against an fp64 reference written here:
sliding windows, softcap, ALiBi and varlen on CPU and CUDA tensors, head dims (CUDA: multiples of 8
up to 256 as they are, others padded to the next multiple of 8, exact), packed QKV/KV,
return_attn_probs -> LSE, the clear error for head_dim > 256 on CUDA, and torch.compile(fullgraph=True)
through the custom ops.

Accuracy rule for half types (FlashAttention-2's): flashbox's max error against the fp64 reference is
at most twice that of the same math done by PyTorch in the input dtype, plus a small absolute term.
Skips, with the reason, where torch, libflashbox or a GPU is missing.
"""

import itertools
import math

import pytest

torch = pytest.importorskip("torch", minversion="2.4", reason="the PyTorch tests need torch >= 2.4")

import pysupport as S  # noqa: E402,F401  (puts python/ on sys.path)
from pysupport import _lib, flashbox  # noqa: E402


def _library_ok():
    try:
        _lib.library()
        return "flashbox_attention_forward_ext" not in getattr(_lib.library(), "missing", []) and \
            hasattr(_lib.library().cdll, "flashbox_attention_forward_ext")
    except _lib.LibraryNotFoundError:
        return False


pytestmark = pytest.mark.skipif(not _library_ok(), reason="libflashbox.so with the *_ext entry points not found")

if _library_ok():
    from flashbox import flash_attn as fa  # noqa: E402


def _have_cuda():
    return torch.cuda.is_available() and flashbox.cuda_device_count() > 0


needs_cuda = pytest.mark.skipif(not (_library_ok() and _have_cuda()), reason="no CUDA GPU, or a CPU-only build")


def reference(q, k, v, causal=False, window=(-1, -1), softcap=0.0, slopes=None, scale=None, dtype=torch.float64):
    """Attention in `dtype` with FlashAttention-2's semantics; q [B, Tq, H, D], k/v [B, Tk, Hk, D].
    Returns o [B, Tq, H, D] and lse [B, H, Tq]; rows that see no key give o = 0, lse = -inf."""
    B, Tq, H, D = q.shape
    Tk, Hk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    qd = q.to(dtype)
    kd = k.to(dtype).repeat_interleave(H // Hk, dim=2)
    vd = v.to(dtype).repeat_interleave(H // Hk, dim=2)
    s = torch.einsum("bthd,bshd->bhts", qd, kd) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Tq, device=q.device).view(-1, 1)
    j = torch.arange(Tk, device=q.device).view(1, -1)
    diag = i + Tk - Tq
    left, right = window
    if causal:
        right = 0
    mask = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device)
    if right >= 0:
        mask &= j <= diag + right
    if left >= 0:
        mask &= j >= diag - left
    if slopes is not None:
        sl = slopes.to(dtype).view(-1, H, 1, 1)
        s = s - sl * (diag - j).abs().to(dtype)
    empty = ~mask.any(-1)                      # rows with no key
    s = s.masked_fill(~mask, float("-inf")).masked_fill(empty.view(Tq, 1), 0.0)
    lse = torch.logsumexp(s, -1).masked_fill(empty, float("-inf"))
    p = torch.softmax(s, -1).masked_fill(empty.view(Tq, 1), 0.0)
    o = torch.einsum("bhts,bshd->bthd", p, vd)
    return o.to(q.dtype) if dtype != torch.float64 else o, lse


def _grads(out, inputs, g):
    return torch.autograd.grad(out, inputs, g)


def _max_err(a, b):
    return (a.double() - b.double()).abs().max().item()


def _check_fa2_rule(got, ref, pt, what, atol=1e-5):
    err, pt_err = _max_err(got, ref), _max_err(pt, ref)
    assert err <= 2 * pt_err + atol, f"{what}: error {err} > 2 x PyTorch's {pt_err} + {atol}"


CPU_CASES = [
    # (Tq, Tk, H, Hk, D, causal, window, softcap, alibi)
    (37, 37, 2, 2, 16, False, (-1, -1), 0.0, None),
    (37, 50, 4, 2, 16, True, (-1, -1), 0.0, None),
    (50, 37, 2, 1, 24, False, (5, 3), 0.0, None),
    (40, 40, 2, 2, 16, True, (7, -1), 0.0, None),
    (33, 45, 2, 2, 16, False, (-1, -1), 2.0, None),
    (45, 33, 3, 3, 16, True, (-1, -1), 0.0, "head"),
    (45, 45, 3, 3, 16, False, (9, 4), 1.5, "batch"),
]


@pytest.mark.parametrize("case", CPU_CASES)
def test_cpu_masks_match_reference(case):
    Tq, Tk, H, Hk, D, causal, window, softcap, alibi = case
    torch.manual_seed(0)
    B = 2
    q = torch.randn(B, Tq, H, D, dtype=torch.float32, requires_grad=True)
    k = torch.randn(B, Tk, Hk, D, dtype=torch.float32, requires_grad=True)
    v = torch.randn(B, Tk, Hk, D, dtype=torch.float32, requires_grad=True)
    slopes = None if alibi is None else (torch.rand(H) * 0.3 if alibi == "head" else torch.rand(B, H) * 0.3)
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap, alibi_slopes=slopes,
                                     return_attn_probs=True)
    o_ref, lse_ref = reference(q, k, v, causal, window, softcap, slopes)
    assert _max_err(out, o_ref) < 1e-5
    finite = torch.isfinite(lse_ref)
    assert torch.equal(torch.isfinite(lse), finite), "rows with no key must have lse = -inf"
    assert _max_err(lse[finite], lse_ref[finite]) < 1e-4
    g = torch.randn_like(out)
    for got, want, name in zip(_grads(out, (q, k, v), g), _grads(o_ref, (q, k, v), g.double()), "qkv"):
        assert _max_err(got, want) < 1e-4, f"d{name}"


def test_cpu_varlen_matches_per_sequence_reference():
    torch.manual_seed(1)
    lens_q, lens_k = [5, 0, 17, 1, 30], [5, 3, 20, 1, 12]
    H, Hk, D = 4, 2, 16
    cu_q = torch.tensor([0] + list(itertools.accumulate(lens_q)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(itertools.accumulate(lens_k)), dtype=torch.int32)
    q = torch.randn(int(cu_q[-1]), H, D, requires_grad=True)
    k = torch.randn(int(cu_k[-1]), Hk, D, requires_grad=True)
    v = torch.randn(int(cu_k[-1]), Hk, D, requires_grad=True)
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                            window_size=(6, -1), return_attn_probs=True)
    assert lse.shape == (H, q.shape[0])
    g = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    for s in range(len(lens_q)):
        a, b, c, d = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s]), int(cu_k[s + 1])
        if b == a:
            continue
        if d == c:
            assert out[a:b].abs().max().item() == 0.0 and torch.isinf(lse[:, a:b]).all()
            continue
        qs, ks, vs = (t.detach()[x:y].unsqueeze(0).requires_grad_() for t, x, y in ((q, a, b), (k, c, d), (v, c, d)))
        o_ref, lse_ref = reference(qs, ks, vs, True, (6, -1))
        assert _max_err(out[a:b], o_ref[0]) < 1e-5, f"sequence {s}"
        refs = torch.autograd.grad(o_ref, (qs, ks, vs), g[a:b].unsqueeze(0).double())
        for got, want, name in zip((dq[a:b], dk[c:d], dv[c:d]), refs, "qkv"):
            assert _max_err(got, want[0]) < 1e-4, f"sequence {s} d{name}"


def test_packed_and_unpacked_agree_cpu():
    torch.manual_seed(2)
    qkv = torch.randn(2, 19, 3, 2, 16, requires_grad=True)
    out = fa.flash_attn_qkvpacked_func(qkv, causal=True, window_size=(4, 0))
    g = torch.randn_like(out)
    (dqkv,) = torch.autograd.grad(out, qkv, g)
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    out2 = fa.flash_attn_func(q, k, v, causal=True, window_size=(4, 0))
    assert torch.equal(out, out2)
    for i, d in enumerate(torch.autograd.grad(out2, (q, k, v), g)):
        assert _max_err(dqkv[:, :, i], d) < 1e-6


def test_unsupported_options_raise():
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(NotImplementedError, match="dropout"):
        fa.flash_attn_func(q, q, q, dropout_p=0.1)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_with_block_table_equals_packed_keys(causal):
    # flash_attn_varlen_func with a block_table (a paged cache, FA2's paged varlen forward) gives what
    # the same keys give packed: sequences of 3 and 1 queries against 20 and 9 keys, 16-key pages
    # in shuffled order.
    torch.manual_seed(5)
    H, Hk, D, P = 2, 1, 16, 16
    lq, lk = [3, 1], [20, 9]
    q = torch.randn(sum(lq), H, D)
    keys = [torch.randn(n, Hk, D) for n in lk]
    vals = [torch.randn(n, Hk, D) for n in lk]
    pages_per = [(n + P - 1) // P for n in lk]
    order = torch.randperm(sum(pages_per) + 1)  # one spare page nobody owns
    kc, vc = torch.randn(len(order), P, Hk, D), torch.randn(len(order), P, Hk, D)
    table = torch.zeros(2, max(pages_per), dtype=torch.int32)
    used = 0
    for b in range(2):
        for j in range(pages_per[b]):
            page = int(order[used]); used += 1
            table[b, j] = page
            rows = keys[b][j * P:(j + 1) * P]
            kc[page, :rows.shape[0]] = rows
            vc[page, :rows.shape[0]] = vals[b][j * P:(j + 1) * P]
    cu_q = torch.tensor([0, 3, 4], dtype=torch.int32)
    cu_k = torch.tensor([0, 20, 29], dtype=torch.int32)
    paged = fa.flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, 3, 20, causal=causal, block_table=table)
    packed = fa.flash_attn_varlen_func(q, torch.cat(keys), torch.cat(vals), cu_q, cu_k, 3, 20, causal=causal)
    assert _max_err(paged, packed) < 1e-5



def reference_with_sink(q, k, v, sink, causal=False, window=(-1, -1), softcap=0.0, dtype=torch.float64):
    """The reference with a learnable sink: a column of logit sink[h] and no value joins each row's softmax,
    so lse' = logaddexp(lse, sink) and o' = o * exp(lse - lse'); a row with no key keeps o = 0."""
    o, lse = reference(q, k, v, causal, window, softcap, dtype=dtype)
    s = sink.to(lse.dtype).view(1, -1, 1).expand_as(lse)
    lse_s = torch.logaddexp(lse, s)
    o = o.to(lse.dtype) * torch.exp(lse - lse_s).transpose(1, 2).unsqueeze(-1)
    return (o.to(q.dtype) if dtype != torch.float64 else o), lse_s


@pytest.mark.parametrize("causal,window,softcap", [(True, (-1, -1), 0.0), (True, (6, -1), 0.0),
                                                   (False, (-1, -1), 2.0)])
def test_cpu_learnable_sink_matches_reference(causal, window, softcap):
    torch.manual_seed(6)
    B, Tq, Tk, H, Hk, D = 2, 21, 29, 4, 2, 16
    q = torch.randn(B, Tq, H, D, requires_grad=True)
    k = torch.randn(B, Tk, Hk, D, requires_grad=True)
    v = torch.randn(B, Tk, Hk, D, requires_grad=True)
    sink = torch.randn(H, requires_grad=True)
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                     return_attn_probs=True, learnable_sink=sink)
    o_ref, lse_ref = reference_with_sink(q, k, v, sink, causal, window, softcap)
    assert _max_err(out, o_ref) < 1e-5
    assert _max_err(lse, lse_ref) < 1e-4
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v, sink), g)
    want = torch.autograd.grad(o_ref, (q, k, v, sink), g.double())
    for a, b, name in zip(got, want, ("q", "k", "v", "sink")):
        assert _max_err(a, b) < 1e-4, f"d{name}"


def test_cpu_learnable_sink_varlen_and_bf16_parameter():
    # A bf16 sink parameter (as a bf16 model holds it) is converted to fp32 inside and gets a bf16 gradient.
    torch.manual_seed(7)
    lens = [9, 0, 14]
    H, Hk, D = 4, 1, 16
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)
    q = torch.randn(int(cu[-1]), H, D, requires_grad=True)
    k = torch.randn(int(cu[-1]), Hk, D, requires_grad=True)
    v = torch.randn(int(cu[-1]), Hk, D, requires_grad=True)
    sink = torch.randn(H, dtype=torch.bfloat16, requires_grad=True)
    out = fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, learnable_sink=sink)
    g = torch.randn_like(out)
    dq, dsink = torch.autograd.grad(out, (q, sink), g)
    assert dsink.dtype == torch.bfloat16
    want_dsink = torch.zeros(H, dtype=torch.float64)
    for s in range(len(lens)):
        a, b = int(cu[s]), int(cu[s + 1])
        if a == b:
            continue
        qs, ks, vs = (t.detach()[a:b].unsqueeze(0).requires_grad_() for t in (q, k, v))
        sk = sink.detach().float().requires_grad_()
        o_ref, _ = reference_with_sink(qs, ks, vs, sk, True)
        assert _max_err(out[a:b], o_ref[0]) < 1e-5, f"sequence {s}"
        dq_ref, ds_ref = torch.autograd.grad(o_ref, (qs, sk), g[a:b].unsqueeze(0).double())
        assert _max_err(dq[a:b], dq_ref[0]) < 1e-4, f"sequence {s} dq"
        want_dsink += ds_ref.double()
    # the gradient is rounded to bf16 (8 bits of mantissa)
    assert _max_err(dsink.float(), want_dsink) <= 1e-2 * max(1.0, want_dsink.abs().max().item())

def test_compile_fullgraph_cpu():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 24, 2, 16) for _ in range(3))

    def f(q, k, v):
        return fa.flash_attn_func(q, k, v, causal=True, window_size=(5, 0), softcap=3.0) * 2

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.allclose(compiled(q, k, v), f(q, k, v))


@needs_cuda
@pytest.mark.parametrize("d", [32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_head_dims_padded_exactly(d, causal):
    torch.manual_seed(4)
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(2, 130, 4, d, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(2, 130, 2, d, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(2, 130, 2, d, device=dev, dtype=dt, requires_grad=True)
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    assert out.shape == q.shape
    o_ref, lse_ref = reference(q, k, v, causal)
    o_pt, _ = reference(q, k, v, causal, dtype=dt)
    _check_fa2_rule(out, o_ref, o_pt, "out")
    assert _max_err(lse, lse_ref) < 2e-2
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), g)
    want = torch.autograd.grad(o_ref, (q, k, v), g.double())
    pt = torch.autograd.grad(o_pt, (q, k, v), g)
    for a, b, c, name in zip(got, want, pt, "qkv"):
        _check_fa2_rule(a, b, c, f"d{name}", atol=1e-4)


@needs_cuda
def test_cuda_packed_qkv_gradients():
    torch.manual_seed(5)
    qkv = torch.randn(2, 200, 3, 4, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    out = fa.flash_attn_qkvpacked_func(qkv, causal=True)
    g = torch.randn_like(out)
    (dqkv,) = torch.autograd.grad(out, qkv, g)
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    out2 = fa.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(out, out2)
    for i, d in enumerate(torch.autograd.grad(out2, (q, k, v), g)):
        assert _max_err(dqkv[:, :, i], d) < 1e-2


@needs_cuda
def test_cuda_refuses_what_it_lacks():
    with pytest.raises(NotImplementedError, match="head_dim = 264"):
        x = torch.randn(1, 64, 2, 264, device="cuda", dtype=torch.bfloat16)
        fa.flash_attn_func(x, x, x)


@needs_cuda
@pytest.mark.parametrize("case", CPU_CASES)
def test_cuda_masks_match_reference(case):
    # The CPU cases on the GPU in bf16 (head dims 16 and 24 padded to 16/24 -> multiples of 8), under
    # FlashAttention-2's accuracy rule, forward and backward, deterministic and not.
    Tq, Tk, H, Hk, D, causal, window, softcap, alibi = case
    torch.manual_seed(5)
    B, dev, dt = 2, "cuda", torch.bfloat16
    q = torch.randn(B, Tq, H, D, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(B, Tk, Hk, D, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(B, Tk, Hk, D, device=dev, dtype=dt, requires_grad=True)
    slopes = None if alibi is None else \
        (torch.rand(H, device=dev) * 0.3 if alibi == "head" else torch.rand(B, H, device=dev) * 0.3)
    for det in (False, True):
        out, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                         alibi_slopes=slopes, deterministic=det, return_attn_probs=True)
        o_ref, lse_ref = reference(q, k, v, causal, window, softcap, slopes)
        o_pt, _ = reference(q, k, v, causal, window, softcap, slopes, dtype=dt)
        _check_fa2_rule(out, o_ref, o_pt, "out")
        finite = torch.isfinite(lse_ref)
        assert torch.equal(torch.isfinite(lse), finite), "rows with no key must have lse = -inf"
        assert _max_err(lse[finite], lse_ref[finite]) < 2e-2
        g = torch.randn_like(out)
        got = torch.autograd.grad(out, (q, k, v), g)
        want = torch.autograd.grad(o_ref, (q, k, v), g.double())
        pt = torch.autograd.grad(o_pt, (q, k, v), g)
        for a, b, c, name in zip(got, want, pt, "qkv"):
            _check_fa2_rule(a, b, c, f"d{name} (deterministic={det})", atol=1e-4)


@needs_cuda
def test_cuda_varlen_matches_per_sequence_reference():
    torch.manual_seed(6)
    lens_q, lens_k = [5, 0, 17, 1, 130], [5, 3, 20, 1, 70]
    H, Hk, D, dev, dt = 4, 2, 64, "cuda", torch.bfloat16
    cu_q = torch.tensor([0] + list(itertools.accumulate(lens_q)), dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0] + list(itertools.accumulate(lens_k)), dtype=torch.int32, device=dev)
    q = torch.randn(int(cu_q[-1]), H, D, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(int(cu_k[-1]), Hk, D, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(int(cu_k[-1]), Hk, D, device=dev, dtype=dt, requires_grad=True)
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                            window_size=(6, -1), softcap=4.0, return_attn_probs=True)
    assert lse.shape == (H, q.shape[0])
    g = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    for s in range(len(lens_q)):
        a, b, c, d = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s]), int(cu_k[s + 1])
        if d == c:
            assert b == a or (out[a:b].abs().max().item() == 0.0 and torch.isinf(lse[:, a:b]).all())
            continue
        if b == a:
            assert dk[c:d].abs().max().item() == 0.0 and dv[c:d].abs().max().item() == 0.0
            continue
        qs, ks, vs = (t.detach()[x:y].unsqueeze(0).requires_grad_() for t, x, y in ((q, a, b), (k, c, d), (v, c, d)))
        o_ref, _ = reference(qs, ks, vs, True, (6, -1), 4.0)
        o_pt, _ = reference(qs, ks, vs, True, (6, -1), 4.0, dtype=dt)
        _check_fa2_rule(out[a:b], o_ref[0], o_pt[0], f"sequence {s} out")
        refs = torch.autograd.grad(o_ref, (qs, ks, vs), g[a:b].unsqueeze(0).double())
        pts = torch.autograd.grad(o_pt, (qs, ks, vs), g[a:b].unsqueeze(0))
        for got, want, pt, name in zip((dq[a:b], dk[c:d], dv[c:d]), refs, pts, "qkv"):
            _check_fa2_rule(got, want[0], pt[0], f"sequence {s} d{name}", atol=1e-4)



@needs_cuda
@pytest.mark.parametrize("varlen", [False, True])
def test_cuda_learnable_sink_matches_reference(varlen):
    torch.manual_seed(8)
    dev, dt = "cuda", torch.bfloat16
    B, T, H, Hk, D = 2, 300, 8, 2, 64
    q = torch.randn(B, T, H, D, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(B, T, Hk, D, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(B, T, Hk, D, device=dev, dtype=dt, requires_grad=True)
    sink = torch.randn(H, device=dev, dtype=torch.float32, requires_grad=True)
    if varlen:
        cu = torch.tensor([0, T, 2 * T], dtype=torch.int32, device=dev)
        out = fa.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu, T, T,
                                        causal=True, window_size=(100, -1), learnable_sink=sink).view(B, T, H, D)
    else:
        out = fa.flash_attn_func(q, k, v, causal=True, window_size=(100, -1), learnable_sink=sink)
    o_ref, _ = reference_with_sink(q, k, v, sink, True, (100, -1))
    o_pt, _ = reference_with_sink(q, k, v, sink, True, (100, -1), dtype=dt)
    _check_fa2_rule(out, o_ref, o_pt, "out")
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v, sink), g)
    want = torch.autograd.grad(o_ref, (q, k, v, sink), g.double())
    pt = torch.autograd.grad(o_pt, (q, k, v, sink), g)
    for a, b, c, name in zip(got, want, pt, ("q", "k", "v", "sink")):
        _check_fa2_rule(a, b, c, f"d{name}", atol=1e-3 if name == "sink" else 1e-4)

@needs_cuda
def test_cuda_compile_fullgraph():
    q, k, v = (torch.randn(2, 128, 4, 80, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def f(q, k, v):
        return fa.flash_attn_func(q, k, v, causal=True)

    compiled = torch.compile(f, fullgraph=True)
    assert torch.allclose(compiled(q, k, v).float(), f(q, k, v).float(), atol=1e-2)
