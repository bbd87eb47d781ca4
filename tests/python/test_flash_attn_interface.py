"""flashbox.flash_attn_interface (FlashAttention-3's public functions) against an fp64 reference written
here: head_dim_v != head_dim, qv, attention_chunk, windows, softcap, GQA, varlen with seqused_q/k, fp8
with descales, num_splits, the KV cache (contiguous and paged, appends, cache_batch_idx, cache_leftpad,
variable-length queries), flash_attn_combine, scheduler metadata, torch.compile(fullgraph=True) and
torch.library.opcheck of the custom ops.

CPU tensors run every case (float32 against fp64, tight tolerances). CUDA tensors run in bf16 under
FlashAttention's accuracy rule (flashbox's max error against fp64 is at most twice that of PyTorch doing
the same math in bf16, plus a small absolute term); a field the CUDA kernels do not take yet raises
NotImplementedError, and those cases skip with the library's message as the reason.
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
        cdll = _lib.library().cdll
    except _lib.LibraryNotFoundError:
        return False
    return all(hasattr(cdll, n) for n in ("flashbox_attention_forward_ext", "flashbox_attention_kvcache",
                                          "flashbox_attention_combine"))


pytestmark = pytest.mark.skipif(not _library_ok(), reason="libflashbox.so with the *_ext, KV-cache and combine "
                                                          "entry points not found")

if _library_ok():
    from flashbox import flash_attn_interface as fa3  # noqa: E402


def _have_cuda():
    return torch.cuda.is_available() and flashbox.cuda_device_count() > 0


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not (_library_ok() and _have_cuda()),
                                                                 reason="no CUDA GPU, or a CPU-only build"))]
FP8 = getattr(torch, "float8_e4m3fn", None)


def reference(q, k, v, causal=False, window=(-1, -1), softcap=0.0, qv=None, chunk=0, scale=None, descales=None,
              dtype=torch.float64):
    """Attention in `dtype` with FlashAttention-3's semantics. q [B, Tq, H, D], k [B, Tk, Hk, D],
    v [B, Tk, Hk, Dv], qv [B, Tq, H, Dv]; descales (q, k, v) fp32 [B, Hk]. Bottom-right masks with
    shift = Tk - Tq; a query at key position p = i + shift sees, with attention_chunk c, only keys
    floor(p / c) * c <= j < that + c. Returns o [B, Tq, H, Dv] and lse [B, H, Tq]; a row that sees no
    key gives o = 0, lse = -inf."""
    B, Tq, H, D = q.shape
    Tk, Hk, Dv = k.shape[1], k.shape[2], v.shape[3]
    g = H // Hk
    qd, kd, vd = (t.float().to(dtype) for t in (q, k, v))  # through fp32: fp8 converts to that
    qvd = qv.float().to(dtype) if qv is not None else None
    if descales is not None:
        dq_, dk_, dv_ = (d.to(q.device, dtype) for d in descales)
        qd = qd * dq_.repeat_interleave(g, dim=1).view(B, 1, H, 1)
        qvd = qvd * dq_.repeat_interleave(g, dim=1).view(B, 1, H, 1) if qvd is not None else None
        kd, vd = kd * dk_.view(B, 1, Hk, 1), vd * dv_.view(B, 1, Hk, 1)
    if scale is None:
        scale = 1.0 / math.sqrt(D + (Dv if qv is not None else 0))
    kd, vd = kd.repeat_interleave(g, dim=2), vd.repeat_interleave(g, dim=2)
    s = torch.einsum("bthd,bshd->bhts", qd, kd)
    if qvd is not None:
        s = s + torch.einsum("bthd,bshd->bhts", qvd, vd)
    s = s * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Tq, device=q.device).view(-1, 1)
    j = torch.arange(Tk, device=q.device).view(1, -1)
    p = i + Tk - Tq
    left, right = (int(w) for w in window)
    if causal:
        right = 0
    mask = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device)
    if right >= 0:
        mask &= j <= p + right
    if left >= 0:
        mask &= j >= p - left
    if chunk > 0:
        start = torch.div(p, chunk, rounding_mode="floor") * chunk
        mask &= (j >= start) & (j < start + chunk)
    empty = ~mask.any(-1)
    s = s.masked_fill(~mask, float("-inf")).masked_fill(empty.view(Tq, 1), 0.0)
    lse = torch.logsumexp(s, -1).masked_fill(empty, float("-inf"))
    prob = torch.softmax(s, -1).masked_fill(empty.view(Tq, 1), 0.0)
    return torch.einsum("bhts,bshd->bthd", prob, vd), lse


def _max_err(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


def _check(got, ref, pt, what, device, atol=None):
    """CPU (fp32): within a small absolute error of fp64. CUDA (bf16): FlashAttention's rule."""
    err = _max_err(got, ref)
    if device == "cpu":
        assert err <= (atol or 2e-5) * 10, f"{what}: error {err} against fp64"
    else:
        pt_err = _max_err(pt, ref)
        assert err <= 2 * pt_err + (atol or 1e-5), f"{what}: error {err} > 2 x PyTorch's {pt_err}"


def _unsupported_skips(fn, *args, **kwargs):
    """fn(...), or a skip naming the field when the library refuses it on this device (CUDA today)."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as e:
        pytest.skip(f"not supported on this device yet: {e}")


FUNC_CASES = [
    # (Tq, Tk, H, Hk, D, Dv, causal, window, softcap, chunk, has_qv)
    (37, 37, 2, 2, 16, 16, False, (-1, -1), 0.0, 0, False),
    (37, 50, 4, 2, 16, 16, True, (-1, -1), 0.0, 0, False),
    (50, 37, 2, 1, 24, 24, False, (5, 3), 0.0, 0, False),
    (33, 45, 2, 2, 16, 16, False, (-1, -1), 2.0, 0, False),
    (40, 40, 2, 2, 16, 32, True, (-1, -1), 0.0, 0, False),     # head_dim_v != head_dim (MLA)
    (29, 41, 4, 2, 32, 16, False, (7, 2), 0.0, 0, False),
    (45, 45, 2, 1, 16, 16, True, (-1, -1), 0.0, 12, False),    # attention_chunk
    (30, 52, 2, 2, 16, 16, False, (9, -1), 0.0, 7, False),
    (21, 34, 4, 2, 16, 32, False, (-1, -1), 0.0, 0, True),     # qv (forward only)
    (21, 21, 2, 1, 16, 48, True, (-1, -1), 0.0, 0, True),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", FUNC_CASES)
def test_func_matches_reference(case, device):
    Tq, Tk, H, Hk, D, Dv, causal, window, softcap, chunk, has_qv = case
    torch.manual_seed(0)
    B, dt = 2, _dtype(device)
    q = torch.randn(B, Tq, H, D, device=device, dtype=dt, requires_grad=True)
    k = torch.randn(B, Tk, Hk, D, device=device, dtype=dt, requires_grad=True)
    v = torch.randn(B, Tk, Hk, Dv, device=device, dtype=dt, requires_grad=True)
    qv = torch.randn(B, Tq, H, Dv, device=device, dtype=dt) if has_qv else None
    out, lse = _unsupported_skips(fa3.flash_attn_func, q, k, v, causal=causal, qv=qv, window_size=window,
                                  attention_chunk=chunk, softcap=softcap, return_attn_probs=True)
    assert out.shape == (B, Tq, H, Dv) and out.dtype == dt and lse.shape == (B, H, Tq)
    o_ref, lse_ref = reference(q, k, v, causal, window, softcap, qv, chunk)
    o_pt, _ = reference(q, k, v, causal, window, softcap, qv, chunk, dtype=dt)
    _check(out, o_ref, o_pt, "out", device)
    finite = torch.isfinite(lse_ref)
    assert torch.equal(torch.isfinite(lse), finite), "rows with no key must have lse = -inf"
    assert _max_err(lse[finite], lse_ref[finite]) < (1e-4 if device == "cpu" else 2e-2)
    g = torch.randn_like(out)
    if has_qv:
        with pytest.raises(NotImplementedError, match="qv"):
            torch.autograd.grad(out, (q, k, v), g)
        return
    got = _unsupported_skips(torch.autograd.grad, out, (q, k, v), g)
    want = torch.autograd.grad(o_ref, (q, k, v), g.double())
    pt = torch.autograd.grad(o_pt, (q, k, v), g)
    for a, b, c, name in zip(got, want, pt, "qkv"):
        _check(a, b, c, f"d{name}", device, atol=1e-4)


def test_num_splits_and_ignored_hints_cpu():
    # num_splits is a schedule: 3 parts give the unsplit answer up to rounding; pack_gqa and sm_margin
    # change nothing.
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 17, 4, 16), torch.randn(2, 70, 2, 16), torch.randn(2, 70, 2, 24)
    one = fa3.flash_attn_func(q, k, v, causal=True)
    three = fa3.flash_attn_func(q, k, v, causal=True, num_splits=3, pack_gqa=True, sm_margin=4)
    assert _max_err(one, three) < 1e-5
    with pytest.raises(ValueError, match="sm_margin"):
        fa3.flash_attn_func(q, k, v, sm_margin=-1)


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_seqused_matches_per_sequence_reference(device):
    torch.manual_seed(2)
    dt = _dtype(device)
    lens_q, lens_k = [5, 9, 17, 1, 30], [5, 3, 20, 6, 12]
    used_q, used_k = [5, 4, 17, 0, 21], [2, 3, 11, 6, 12]
    H, Hk, D, Dv = 4, 2, 16, 16
    cu = lambda lens: torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device=device)
    cu_q, cu_k = cu(lens_q), cu(lens_k)
    su_q = torch.tensor(used_q, dtype=torch.int32, device=device)
    su_k = torch.tensor(used_k, dtype=torch.int32, device=device)
    q = torch.randn(sum(lens_q), H, D, device=device, dtype=dt, requires_grad=True)
    k = torch.randn(sum(lens_k), Hk, D, device=device, dtype=dt, requires_grad=True)
    v = torch.randn(sum(lens_k), Hk, Dv, device=device, dtype=dt, requires_grad=True)
    out, lse = _unsupported_skips(fa3.flash_attn_varlen_func, q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                  seqused_q=su_q, seqused_k=su_k, causal=True, window_size=(6, -1),
                                  return_attn_probs=True)
    assert out.shape == (q.shape[0], H, Dv) and lse.shape == (H, q.shape[0])
    g = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    for s in range(len(lens_q)):
        a, c = int(cu_q[s]), int(cu_k[s])
        b, d = a + used_q[s], c + used_k[s]
        # rows past the used lengths: out 0 (flashbox zeroes them), no gradient
        assert out[b:int(cu_q[s + 1])].abs().sum().item() == 0.0
        assert dk[d:int(cu_k[s + 1])].abs().sum().item() == 0.0 and dv[d:int(cu_k[s + 1])].abs().sum().item() == 0.0
        if b == a:
            continue
        qs, ks, vs = (t.detach()[x:y].unsqueeze(0).requires_grad_() for t, x, y in ((q, a, b), (k, c, d), (v, c, d)))
        o_ref, lse_ref = reference(qs, ks, vs, True, (6, -1))
        o_pt, _ = reference(qs, ks, vs, True, (6, -1), dtype=dt)
        _check(out[a:b], o_ref[0], o_pt[0], f"sequence {s} out", device)
        if d == c:
            continue
        refs = torch.autograd.grad(o_ref, (qs, ks, vs), g[a:b].unsqueeze(0).double())
        pts = torch.autograd.grad(o_pt, (qs, ks, vs), g[a:b].unsqueeze(0))
        for got, want, pt, name in zip((dq[a:b], dk[c:d], dv[c:d]), refs, pts, "qkv"):
            _check(got, want[0], pt[0], f"sequence {s} d{name}", device, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_qv_matches_per_sequence_reference(device):
    # qv in the varlen forward (the explicit forward on CUDA): sequences of 0 and 1 queries, one without
    # keys, seqused_k shorter than a span, a chunk and a window; rows past seqused_q stay 0.
    torch.manual_seed(3)
    dt = _dtype(device)
    lens_q, lens_k = [4, 0, 1, 13, 3], [9, 5, 1, 21, 0]
    used_k = [9, 5, 1, 15, 0]
    H, Hk, D, Dv = 4, 1, 16, 64
    cu = lambda lens: torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device=device)
    cu_q, cu_k = cu(lens_q), cu(lens_k)
    su_k = torch.tensor(used_k, dtype=torch.int32, device=device)
    q = torch.randn(sum(lens_q), H, D, device=device, dtype=dt)
    qv = torch.randn(sum(lens_q), H, Dv, device=device, dtype=dt)
    k = torch.randn(sum(lens_k), Hk, D, device=device, dtype=dt)
    v = torch.randn(sum(lens_k), Hk, Dv, device=device, dtype=dt)
    out, lse = fa3.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), seqused_k=su_k, qv=qv,
                                          causal=True, window_size=(10, -1), attention_chunk=8,
                                          return_attn_probs=True)
    assert out.shape == (q.shape[0], H, Dv) and lse.shape == (H, q.shape[0])
    for s in range(len(lens_q)):
        a, b, c = int(cu_q[s]), int(cu_q[s + 1]), int(cu_k[s])
        if b == a:
            continue
        d = c + used_k[s]
        args = (q[a:b].unsqueeze(0), k[c:d].unsqueeze(0), v[c:d].unsqueeze(0))
        o_ref, lse_ref = reference(*args, True, (10, -1), qv=qv[a:b].unsqueeze(0), chunk=8)
        o_pt, _ = reference(*args, True, (10, -1), qv=qv[a:b].unsqueeze(0), chunk=8, dtype=dt)
        _check(out[a:b], o_ref[0], o_pt[0], f"sequence {s} out", device)
        finite = torch.isfinite(lse_ref[0])
        assert torch.equal(torch.isfinite(lse[:, a:b]), finite), f"sequence {s}: rows with no key have lse = -inf"
        assert _max_err(lse[:, a:b][finite], lse_ref[0][finite]) < (1e-4 if device == "cpu" else 2e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_seqused_and_chunk_that_change_nothing(device):
    # seqused equal to the sequences' lengths (as FlashAttention-3's varlen test passes) and a chunk at
    # least as long as every sequence's keys are the plain call; on CUDA, whose kernels take neither
    # field, they are dropped after one host read instead of refused.
    torch.manual_seed(10)
    dt = _dtype(device)
    lens_q, lens_k = [3, 8, 5], [9, 8, 20]
    cu_q = torch.tensor([0, 3, 11, 16], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 9, 17, 37], dtype=torch.int32, device=device)
    q = torch.randn(16, 4, 64, device=device, dtype=dt)
    k, v = torch.randn(37, 2, 64, device=device, dtype=dt), torch.randn(37, 2, 64, device=device, dtype=dt)
    plain = fa3.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 8, 20, causal=True)
    same = fa3.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 8, 20, causal=True, attention_chunk=20,
                                      seqused_q=torch.tensor(lens_q, dtype=torch.int32, device=device),
                                      seqused_k=torch.tensor(lens_k, dtype=torch.int32, device=device))
    assert _max_err(plain, same) < 1e-5
    qb, kb, vb = torch.randn(2, 7, 4, 64, device=device, dtype=dt), torch.randn(2, 9, 2, 64, device=device, dtype=dt), \
        torch.randn(2, 9, 2, 64, device=device, dtype=dt)
    assert _max_err(fa3.flash_attn_func(qb, kb, vb, attention_chunk=9), fa3.flash_attn_func(qb, kb, vb)) < 1e-5


@pytest.mark.skipif(FP8 is None, reason="this torch has no float8_e4m3fn")
def test_fp8_with_descales_cpu():
    torch.manual_seed(3)
    B, Tq, Tk, H, Hk, D = 2, 19, 33, 4, 2, 32
    q, k, v = (torch.randn(B, t, h, D).to(FP8) for t, h in ((Tq, H), (Tk, Hk), (Tk, Hk)))
    descales = [torch.rand(B, Hk) * 2 for _ in range(3)]
    out, lse = fa3.flash_attn_func(q, k, v, causal=True, q_descale=descales[0], k_descale=descales[1],
                                   v_descale=descales[2], return_attn_probs=True)
    assert out.dtype == torch.bfloat16 and out.shape == (B, Tq, H, D)
    o_ref, lse_ref = reference(q, k, v, True, descales=descales)
    assert _max_err(out, o_ref) < 2e-2 * max(1.0, o_ref.abs().max().item())
    assert _max_err(lse, lse_ref) < 1e-3


def test_qkvpacked_forms_cpu():
    torch.manual_seed(4)
    qkv = torch.randn(2, 19, 3, 2, 16, requires_grad=True)
    out = fa3.flash_attn_qkvpacked_func(qkv, causal=True, window_size=(4, 0))
    (dqkv,) = torch.autograd.grad(out, qkv, torch.ones_like(out))
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    out2 = fa3.flash_attn_func(q, k, v, causal=True, window_size=(4, 0))
    assert torch.equal(out, out2)
    for i, d in enumerate(torch.autograd.grad(out2, (q, k, v), torch.ones_like(out2))):
        assert _max_err(dqkv[:, :, i], d) < 1e-6
    # GQA packing: [batch, seqlen, num_heads_q + 2 * nheads_kv, headdim]
    packed = torch.randn(2, 11, 4 + 2 * 2, 16)
    out3 = fa3.flash_attn_qkvpacked_func(packed, num_heads_q=4)
    q, k, v = packed.split([4, 2, 2], dim=2)
    assert torch.equal(out3, fa3.flash_attn_func(q, k, v))
    with pytest.raises(ValueError, match="num_heads_q"):
        fa3.flash_attn_qkvpacked_func(packed)


def _page_table(entries, blocks, device):
    """Shuffled pages for each entry's blocks, two spare pages nobody owns: int32 [entries, blocks]."""
    order = torch.randperm(entries * blocks + 2)
    return order[:entries * blocks].view(entries, blocks).to(device=device, dtype=torch.int32)


def _paged(logical, table):
    """A logical cache [entries, capacity, H, D] laid out in the pages `table` names (+ the spares)."""
    page_size = logical.shape[1] // table.shape[1]
    pages = torch.randn(table.numel() + 2, page_size, *logical.shape[2:], dtype=logical.dtype, device=logical.device)
    pages[table.view(-1).long()] = logical.reshape(table.numel(), page_size, *logical.shape[2:])
    return pages


def _unpage(pages, table):
    e, nb = table.shape
    return pages[table.view(-1).long()].reshape(e, nb * pages.shape[1], *pages.shape[2:])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size", [None, 4, 16])
@pytest.mark.parametrize("varlen_q", [False, True])
def test_kvcache_append_matches_reference(page_size, varlen_q, device):
    torch.manual_seed(5)
    dt = _dtype(device)
    B, Bc, H, Hk, D, cap, new = 3, 4, 4, 2, 16, 32, 3
    seqlens = torch.tensor([5, 0, 20], dtype=torch.int32, device=device)
    leftpad = torch.tensor([2, 0, 4], dtype=torch.int32, device=device)
    idx = torch.tensor([2, 0, 3], dtype=torch.int32, device=device)
    logical_k = torch.randn(Bc, cap, Hk, D, device=device, dtype=dt)
    logical_v = torch.randn(Bc, cap, Hk, D, device=device, dtype=dt)
    k_new = torch.randn(B, new, Hk, D, device=device, dtype=dt)
    v_new = torch.randn(B, new, Hk, D, device=device, dtype=dt)
    lens_q = [2, 1, 3] if varlen_q else [2, 2, 2]
    q = torch.randn(sum(lens_q), H, D, device=device, dtype=dt) if varlen_q else \
        torch.randn(B, 2, H, D, device=device, dtype=dt)
    cu_q = torch.tensor([0] + list(itertools.accumulate(lens_q)), dtype=torch.int32, device=device)
    if page_size is None:
        kc, vc, table = logical_k.clone(), logical_v.clone(), None
    else:
        table = _page_table(Bc, cap // page_size, device)
        kc, vc = _paged(logical_k, table), _paged(logical_v, table)
    out, lse, *rest = fa3.flash_attn_with_kvcache(
        q, kc, vc, k_new, v_new, cache_seqlens=seqlens, cache_batch_idx=idx, cache_leftpad=leftpad,
        page_table=table, cu_seqlens_q=cu_q if varlen_q else None, max_seqlen_q=max(lens_q), causal=True,
        return_softmax_lse=True)
    assert len(rest) == 2 and out.shape == q.shape
    assert lse.shape == ((H, q.shape[0]) if varlen_q else (B, H, 2))
    got_k = kc if table is None else _unpage(kc, table)
    got_v = vc if table is None else _unpage(vc, table)
    for b in range(B):
        e, sl, lp = int(idx[b]), int(seqlens[b]), int(leftpad[b])
        want_k, want_v = logical_k[e].clone(), logical_v[e].clone()
        want_k[sl:sl + new], want_v[sl:sl + new] = k_new[b], v_new[b]
        assert torch.equal(got_k[e], want_k) and torch.equal(got_v[e], want_v), f"cache entry {e} after the append"
        qb = q[int(cu_q[b]):int(cu_q[b + 1])].unsqueeze(0) if varlen_q else q[b:b + 1]
        ob = out[int(cu_q[b]):int(cu_q[b + 1])] if varlen_q else out[b]
        L = sl + new
        o_ref, _ = reference(qb, want_k[lp:L].unsqueeze(0), want_v[lp:L].unsqueeze(0), causal=True)
        o_pt, _ = reference(qb, want_k[lp:L].unsqueeze(0), want_v[lp:L].unsqueeze(0), causal=True, dtype=dt)
        _check(ob, o_ref[0], o_pt[0], f"entry {b}", device)


KV_VALUE_CASES = [
    # (D, Dv, has_qv, chunk): qv (MLA's absorbed decode), head_dim_v != head_dim, attention_chunk
    (16, 32, True, 0),
    (16, 48, False, 0),
    (16, 16, False, 5),
    (16, 32, True, 6),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size", [None, 16])
@pytest.mark.parametrize("case", KV_VALUE_CASES)
def test_kvcache_qv_head_dim_v_and_chunk(case, page_size, device):
    # flashbox_kvcache_args.qv / head_dim_v / attention_chunk (the explicit forward on CUDA): the
    # appended cache and the output against the reference on each entry's keys cache_leftpad ..
    # cache_seqlens + new (positions counted from cache_leftpad, as FlashAttention-3 counts them).
    D, Dv, has_qv, chunk = case
    torch.manual_seed(7)
    dt = _dtype(device)
    B, H, Hk, Tq, cap, new = 2, 4, 2, 2, 32, 2
    seqlens = torch.tensor([7, 20], dtype=torch.int32, device=device)
    leftpad = torch.tensor([3, 0], dtype=torch.int32, device=device)  # chunks count from here (FA3)
    logical_k = torch.randn(B, cap, Hk, D, device=device, dtype=dt)
    logical_v = torch.randn(B, cap, Hk, Dv, device=device, dtype=dt)
    k_new = torch.randn(B, new, Hk, D, device=device, dtype=dt)
    v_new = torch.randn(B, new, Hk, Dv, device=device, dtype=dt)
    q = torch.randn(B, Tq, H, D, device=device, dtype=dt)
    qv = torch.randn(B, Tq, H, Dv, device=device, dtype=dt) if has_qv else None
    if page_size is None:
        kc, vc, table = logical_k.clone(), logical_v.clone(), None
    else:
        table = _page_table(B, cap // page_size, device)
        kc, vc = _paged(logical_k, table), _paged(logical_v, table)
    out, lse, *_ = fa3.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, qv=qv, cache_seqlens=seqlens,
                                               cache_leftpad=leftpad, page_table=table, causal=True,
                                               attention_chunk=chunk, return_softmax_lse=True)
    assert out.shape == (B, Tq, H, Dv) and lse.shape == (B, H, Tq)
    got_k = kc if table is None else _unpage(kc, table)
    got_v = vc if table is None else _unpage(vc, table)
    for b in range(B):
        sl = int(seqlens[b])
        want_k, want_v = logical_k[b].clone(), logical_v[b].clone()
        want_k[sl:sl + new], want_v[sl:sl + new] = k_new[b], v_new[b]
        assert torch.equal(got_k[b], want_k) and torch.equal(got_v[b], want_v), f"cache entry {b} after the append"
        L, lp = sl + new, int(leftpad[b])
        args = (q[b:b + 1], want_k[lp:L].unsqueeze(0), want_v[lp:L].unsqueeze(0))
        qv_b = qv[b:b + 1] if qv is not None else None
        o_ref, lse_ref = reference(*args, causal=True, qv=qv_b, chunk=chunk)
        o_pt, _ = reference(*args, causal=True, qv=qv_b, chunk=chunk, dtype=dt)
        _check(out[b], o_ref[0], o_pt[0], f"entry {b}", device)
        assert _max_err(lse[b], lse_ref[0]) < (1e-4 if device == "cpu" else 2e-2)


def test_kvcache_qv_is_checked():
    q, kc = torch.randn(1, 1, 2, 16), torch.randn(1, 8, 2, 16)
    seqlens = torch.tensor([4], dtype=torch.int32)
    with pytest.raises(ValueError, match="qv must be"):
        fa3.flash_attn_with_kvcache(q, kc, torch.randn(1, 8, 2, 32), qv=torch.randn(1, 1, 2, 16),
                                    cache_seqlens=seqlens)


def test_scheduler_metadata_is_checked():
    torch.manual_seed(6)
    q, kc, vc = torch.randn(2, 1, 4, 16), torch.randn(2, 10, 2, 16), torch.randn(2, 10, 2, 16)
    seqlens = torch.tensor([3, 10], dtype=torch.int32)
    meta = fa3.get_scheduler_metadata(2, 1, 10, 4, 2, 16, seqlens, torch.float32, causal=True)
    assert meta.dtype == torch.int32
    plain = fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True)
    with_meta = fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, causal=True, scheduler_metadata=meta)
    assert torch.equal(plain, with_meta)
    wrong = fa3.get_scheduler_metadata(2, 1, 10, 8, 2, 16, seqlens)
    with pytest.raises(ValueError, match="scheduler_metadata"):
        fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, scheduler_metadata=wrong)


def _combine_reference(out_partial, lse_partial):
    lse = torch.logsumexp(lse_partial.double(), dim=0)
    w = torch.exp(lse_partial.double() - lse).nan_to_num(0.0)
    return (w.unsqueeze(-1) * out_partial.double()).sum(0), lse


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_combine_matches_reference(out_dtype, device):
    torch.manual_seed(7)
    n, B, T, H, D = 5, 3, 7, 4, 24  # n: splits
    # non-contiguous inputs, as FlashAttention-3's test passes them
    out_partial = torch.randn(2 * n, B, H, T, D, device=device).transpose(2, 3)[:n]
    lse_partial = torch.randn(n, B, 2 * H, T, device=device).transpose(-1, -2)[..., :H]
    lse_partial[n // 2:, :1] = -math.inf   # parts that saw no key are skipped
    lse_partial[:, 2, 0] = -math.inf       # a row no part saw: out 0, lse -inf
    out, lse = fa3.flash_attn_combine(out_partial, lse_partial, out_dtype=out_dtype)
    o_ref, lse_ref = _combine_reference(out_partial, lse_partial)
    assert out.dtype == out_dtype and out.shape == (B, T, H, D) and lse.shape == (B, T, H)
    assert torch.allclose(lse.double(), lse_ref, atol=1e-5, rtol=1e-5)
    assert _max_err(out, o_ref) < (1e-5 if out_dtype == torch.float32 else 2e-2)
    assert out[2, 0].abs().max().item() == 0.0
    dest = torch.empty(B, T, H, D, dtype=out_dtype, device=device)
    res, _ = fa3.flash_attn_combine(out_partial, lse_partial, out=dest)
    assert res is dest and torch.equal(dest, out)


def test_compile_fullgraph_cpu():
    torch.manual_seed(8)
    q, k = torch.randn(1, 24, 4, 16, requires_grad=True), torch.randn(1, 30, 2, 16, requires_grad=True)
    v = torch.randn(1, 30, 2, 24, requires_grad=True)

    def f(q, k, v):
        return fa3.flash_attn_func(q, k, v, causal=True, window_size=(5, 0), softcap=3.0) * 2

    explanation = torch._dynamo.explain(f)(q, k, v)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got, want = compiled(q, k, v), f(q, k, v)
    assert torch.allclose(got, want)
    g = torch.randn_like(got)
    for a, b in zip(torch.autograd.grad(got, (q, k, v), g), torch.autograd.grad(want, (q, k, v), g)):
        assert torch.allclose(a, b, atol=1e-6)


def test_opcheck_custom_ops_cpu():
    torch.manual_seed(9)
    opcheck = torch.library.opcheck
    q = torch.randn(1, 5, 2, 8, requires_grad=True)
    k = torch.randn(1, 7, 1, 8, requires_grad=True)
    v = torch.randn(1, 7, 1, 12, requires_grad=True)
    scalars = (0, 0, 0.3, True, -1, 0, 0, 0.0, 1, False)
    opcheck(torch.ops.flashbox.fa3_fwd.default, (q, k, v, None, None, None, None, None, None, None, None) + scalars)
    out, lse = torch.ops.flashbox.fa3_fwd(q, k, v, None, None, None, None, None, None, None, None, *scalars)
    dout = torch.randn_like(out)
    opcheck(torch.ops.flashbox.fa3_bwd.default,
            (dout, q.detach(), k.detach(), v.detach(), out.detach(), lse, None, None, None, None, 0, 0, 0.3, True,
             -1, 0, 0, 0.0, False))
    opcheck(torch.ops.flashbox.fa3_combine.default, (torch.randn(3, 1, 4, 2, 8), torch.randn(3, 1, 4, 2), 0))
    qd, kc, vc = torch.randn(2, 1, 2, 16), torch.randn(2, 12, 1, 16), torch.randn(2, 12, 1, 16)
    kn, vn = torch.randn(2, 1, 1, 16), torch.randn(2, 1, 1, 16)
    seqlens = torch.tensor([3, 7], dtype=torch.int32)
    opcheck(torch.ops.flashbox.fa3_kvcache.default,
            (qd, kc, vc, kn, vn, None, None, None, seqlens, None, None, None, None, None, None, None, 0.25, True, -1,
             -1, 0, 0.0, True, 0))
    # qv with a V cache of its own head dim (out has v_cache's head dim) and a chunk
    qv, vc32, vn32 = torch.randn(2, 1, 2, 32), torch.randn(2, 12, 1, 32), torch.randn(2, 1, 1, 32)
    opcheck(torch.ops.flashbox.fa3_kvcache.default,
            (qd, kc, vc32, kn, vn32, qv, None, None, seqlens, None, None, None, None, None, None, None, 0.2, True, -1,
             -1, 4, 0.0, True, 0))
