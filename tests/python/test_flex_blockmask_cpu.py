"""flashbox.flex_attention's eager half (flashbox._flex_core) on the CPU: a FlexAttention BlockMask
(here a stand-in object with BlockMask's attributes, so that torch's FlexAttention is not needed) as
flashbox_block_mask, and the forward and backward through the C API's CPU backend against an fp64
dense reference: partial and full blocks, empty rows (out 0, lse -inf, no gradient), GQA, a sequence
length that is not a multiple of the block size, broadcast batch / heads, [B, H, T, D] strided inputs.
Needs torch >= 1.13 and libflashbox; skips with the reason otherwise.
"""

import math
import types

import pytest

torch = pytest.importorskip("torch", reason="the flex_attention CPU tests need torch")
if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (1, 13):
    pytest.skip(f"flashbox._flex_core needs torch >= 1.13, this is {torch.__version__}", allow_module_level=True)

import pysupport as S  # noqa: E402
from pysupport import _lib  # noqa: E402
from flashbox import _flex_core as core  # noqa: E402


def _lib_or_skip():
    S.require_symbol("flashbox_version")
    try:
        _lib.library().cdll.flashbox_attention_forward_ext
    except AttributeError:
        S.skip("the library has no flashbox_attention_forward_ext")


def make_block_mask(kinds: torch.Tensor, Tq: int, Tk: int, qbs: int, kvbs: int, transposes=True, dtype=torch.int32):
    """A BlockMask stand-in from block kinds [B, H, nq, nk] (0 empty, 1 partial, 2 full), laid out as
    FlexAttention's (ascending indices, the rest of each row filled with 0)."""
    Bm, Hm, nq, nk = kinds.shape

    def lists(k, value):
        num = (k == value).sum(-1).to(dtype)
        idx = torch.zeros(k.shape, dtype=dtype)
        for b in range(k.shape[0]):
            for h in range(k.shape[1]):
                for r in range(k.shape[2]):
                    cols = (k[b, h, r] == value).nonzero().flatten()
                    idx[b, h, r, :len(cols)] = cols.to(dtype)
        return num, idx

    kv_num, kv_idx = lists(kinds, 1)
    fkv_num, fkv_idx = lists(kinds, 2)
    bm = types.SimpleNamespace(kv_num_blocks=kv_num, kv_indices=kv_idx, full_kv_num_blocks=fkv_num,
                               full_kv_indices=fkv_idx, q_num_blocks=None, q_indices=None,
                               full_q_num_blocks=None, full_q_indices=None, BLOCK_SIZE=(qbs, kvbs),
                               seq_lengths=(Tq, Tk), mask_mod=None)
    if transposes:
        kt = kinds.transpose(-1, -2)
        bm.q_num_blocks, bm.q_indices = lists(kt, 1)
        bm.full_q_num_blocks, bm.full_q_indices = lists(kt, 2)
    return bm


def dense_visible(kinds, Tq, Tk, qbs, kvbs):
    """[B', H', Tq, Tk] bool: a listed block (partial or full) admits every element (no mask_mod)."""
    vis = kinds > 0
    vis = vis.repeat_interleave(qbs, dim=2)[:, :, :Tq].repeat_interleave(kvbs, dim=3)[:, :, :, :Tk]
    return vis


def reference(q, k, v, visible, scale):
    q, k, v = q.double(), k.double(), v.double()
    Hq, Hkv = q.shape[1], k.shape[1]
    k = k.repeat_interleave(Hq // Hkv, dim=1)
    v = v.repeat_interleave(Hq // Hkv, dim=1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    s = s.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("bhqk,bhkd->bhqd", p, v), lse


CASES = [
    # B, Hq, Hkv, Tq, Tk, D, qbs, kvbs, broadcast batch/heads
    (2, 2, 2, 37, 45, 16, 8, 16, False),
    (1, 4, 2, 64, 64, 32, 16, 16, True),    # GQA, a mask broadcast over batch and heads
    (2, 3, 1, 20, 33, 8, 8, 8, False),      # MQA, T not a multiple of the block
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}_H{}-{}_T{}x{}_D{}_blk{}x{}_bc{}".format(*c))
def test_cpu_forward_backward_with_block_mask(case):
    _lib_or_skip()
    B, Hq, Hkv, Tq, Tk, D, qbs, kvbs, bc = case
    g = torch.Generator().manual_seed(1)
    nq, nk = -(-Tq // qbs), -(-Tk // kvbs)
    kinds = torch.randint(0, 3, (1 if bc else B, 1 if bc else Hq, nq, nk), generator=g)
    kinds[..., 0, :] = 0          # the first query block sees no key: out 0, lse -inf, no gradient
    bm = make_block_mask(kinds, Tq, Tk, qbs, kvbs, dtype=torch.int64)   # converted to int32 on the way
    tables, q_bs, kv_bs = core.block_mask_tables(bm, torch.device("cpu"), Tq, Tk, B, Hq)
    assert (q_bs, kv_bs) == (qbs, kvbs)
    assert all(t is None or (t.dtype == torch.int32 and t.is_contiguous()) for t in tables)
    # [B, H, T, D] views of [B, T, H, D] storage: strided, handed over without a copy
    q = torch.randn(B, Tq, Hq, D, generator=g).transpose(1, 2).requires_grad_()
    k = torch.randn(B, Tk, Hkv, D, generator=g).transpose(1, 2).requires_grad_()
    v = torch.randn(B, Tk, Hkv, D, generator=g).transpose(1, 2).requires_grad_()
    scale = 0.3
    o, lse = core.forward(q.detach(), k.detach(), v.detach(), tables, qbs, kvbs, 0, scale)
    visible = dense_visible(kinds, Tq, Tk, qbs, kvbs).expand(B, Hq, Tq, Tk)
    ref_o, ref_lse = reference(q, k, v, visible, scale)
    assert o.shape == (B, Hq, Tq, D) and o.is_contiguous()
    torch.testing.assert_close(o.double(), ref_o.detach(), atol=2e-5, rtol=2e-5)
    assert torch.isneginf(lse[:, :, :qbs]).all() and (o[:, :, :qbs] == 0).all()
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    torch.testing.assert_close(lse.double()[finite], ref_lse.detach()[finite], atol=2e-5, rtol=2e-5)

    dout = torch.randn(B, Hq, Tq, D, generator=g)
    dq, dk, dv = core.backward(dout, q.detach(), k.detach(), v.detach(), o, lse, tables, qbs, kvbs, 0, scale)
    ref_o.backward(dout.double())
    for name, got, want in (("dq", dq, q.grad), ("dk", dk, k.grad), ("dv", dv, v.grad)):
        torch.testing.assert_close(got.double(), want.double(), atol=5e-5, rtol=5e-5, msg=name)
    assert (dq[:, :, :qbs] == 0).all()


def test_without_transposes_and_without_full_blocks():
    _lib_or_skip()
    B, H, T, D, bs = 1, 2, 24, 8, 8
    g = torch.Generator().manual_seed(2)
    kinds = torch.randint(0, 2, (B, H, 3, 3), generator=g)   # partial or empty only
    bm = make_block_mask(kinds, T, T, bs, bs, transposes=False)
    bm.full_kv_num_blocks = bm.full_kv_indices = None
    tables, _, _ = core.block_mask_tables(bm, torch.device("cpu"), T, T, B, H)
    assert tables[2:] == [None] * 6
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    o, _ = core.forward(q, k, v, tables, bs, bs, 0, 0.0)
    ref, _ = reference(q, k, v, dense_visible(kinds, T, T, bs, bs), 1 / math.sqrt(D))
    torch.testing.assert_close(o.double(), ref, atol=2e-5, rtol=2e-5)


def test_block_mask_errors():
    kinds = torch.ones(2, 1, 2, 2, dtype=torch.int64)
    bm = make_block_mask(kinds, 16, 16, 8, 8)
    cpu = torch.device("cpu")
    with pytest.raises(ValueError, match="sequence lengths"):
        core.block_mask_tables(bm, cpu, 17, 16, 2, 1)
    with pytest.raises(ValueError, match="batch and heads"):
        core.block_mask_tables(bm, cpu, 16, 16, 3, 1)
    bm.seq_lengths = None
    with pytest.raises(ValueError, match="query blocks"):
        core.block_mask_tables(bm, cpu, 24, 16, 2, 1)
    with pytest.raises(TypeError, match="BlockMask"):
        core.block_mask_tables(object(), cpu, 16, 16, 2, 1)
    bm.full_kv_indices = None
    with pytest.raises(ValueError, match="full_kv_indices"):
        core.block_mask_tables(bm, cpu, 16, 16, 2, 1)


def test_malformed_tables_are_refused_by_the_c_api():
    """An index out of range: the C API's CPU checks refuse it before anything is written."""
    _lib_or_skip()
    kinds = torch.ones(1, 1, 2, 2, dtype=torch.int64)
    bm = make_block_mask(kinds, 16, 16, 8, 8, transposes=False)
    bm.kv_indices[0, 0, 1, 1] = 5
    tables, _, _ = core.block_mask_tables(bm, torch.device("cpu"), 16, 16, 1, 1)
    q = torch.randn(1, 1, 16, 8)
    with pytest.raises(_lib.FlashboxError):
        core.forward(q, q, q, tables, 8, 8, 0, 0.0)


def test_gqa_needs_enable_gqa():
    q, k = torch.randn(1, 4, 8, 8), torch.randn(1, 2, 8, 8)
    with pytest.raises(ValueError, match="enable_gqa"):
        core.check_inputs(q, k, k, enable_gqa=False)
    core.check_inputs(q, k, k, enable_gqa=True)
    with pytest.raises(ValueError, match="multiple"):
        core.check_inputs(q, torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8), enable_gqa=True)


def test_mask_mod_on_cpu_is_refused_clearly():
    _lib_or_skip()
    from flashbox import flex_translate as ft

    def causal(b, h, q_idx, kv_idx):   # not a built-in family (those run on the CPU: test_flex_families.py)
        return (q_idx >= kv_idx) & ((q_idx - kv_idx) % 2 == 0)
    try:
        key = core.mask_mod_key(causal)
    except _lib.FlashboxError as e:
        if e.code == _lib.ErrorCode.UNSUPPORTED_IMPL:
            S.skip(f"no NVRTC in this library: {e.message}")
        raise
    except AttributeError as e:
        S.skip(f"no flashbox_mod_create: {e}")
    assert key and core.mask_mod_key(causal) == key       # once per function
    assert core.mod_entry(key).broadcast == 3              # reads neither b nor h
    assert ft.is_noop_mask(None) and core.mask_mod_key(None) == 0
    q = torch.randn(1, 1, 16, 8)
    with pytest.raises(NotImplementedError, match="only on CUDA"):
        core.forward(q, q, q, [None] * 8, 0, 0, key, 0.0)
