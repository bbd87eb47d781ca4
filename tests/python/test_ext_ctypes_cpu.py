"""The ctypes view of flashbox.h's Extension 1 (flashbox._ext): struct layout against a C compiler, and
a CPU call with a sliding window against a plain-Python fp64 reference. No torch, no numpy, no GPU.

Runs under pytest, or alone (`python3 tests/python/test_ext_ctypes_cpu.py`, as CTest does).
"""

import ctypes
import math
import sys

import pysupport as S
from pysupport import _lib

from flashbox import _ext

F32 = _lib.DType.FLOAT32


def test_ext_struct_layout_matches_c_compiler():
    S.assert_struct_layout_matches_c((_ext.AttentionExt, "flashbox_attention_ext"),
                                     (_ext.CombineArgs, "flashbox_combine_args"))


def _reference_window(q, k, v, B, Tq, Tk, H, D, left, right, chunk=0):
    """Plain-Python fp64 attention with FlashAttention-2's window (bottom-right aligned) and
    FlashAttention-3's attention_chunk (0: off)."""
    out = [[[[0.0] * D for _ in range(H)] for _ in range(Tq)] for _ in range(B)]
    scale = 1.0 / math.sqrt(D)
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                diag = i + Tk - Tq
                keys = [j for j in range(Tk) if (right < 0 or j <= diag + right) and (left < 0 or j >= diag - left)
                        and (chunk == 0 or diag // chunk == j // chunk)]
                if not keys:
                    continue
                s = [scale * sum(q.get(b, i, h, x) * k.get(b, j, h, x) for x in range(D)) for j in keys]
                m = max(s)
                p = [math.exp(x - m) for x in s]
                z = sum(p)
                for x in range(D):
                    out[b][i][h][x] = sum(pj * v.get(b, j, h, x) for pj, j in zip(p, keys)) / z
    return out


def _assert_close(o, want, Tq, H, D):
    """o (batch entry 0) against a _reference_window result, element by element, within 1e-5."""
    for i in range(Tq):
        for h in range(H):
            for x in range(D):
                assert abs(o.get(0, i, h, x) - want[0][i][h][x]) < 1e-5, (i, h, x)


def _cpu_args(impl, q, k, v, o, B, Tq, Tk, H, D):
    """fp32 CPU arguments over the host tensors q, k, v, o (heads_q = heads_kv = H, head dim D)."""
    a = _lib.AttentionArgs()
    a.device, a.dtype, a.impl = _lib.Device.CPU, F32, impl
    a.batch, a.seqlen_q, a.seqlen_k, a.heads_q, a.heads_kv, a.head_dim = B, Tq, Tk, H, H, D
    a.q, a.k, a.v, a.o = q.ptr, k.ptr, v.ptr, o.ptr
    a.q_stride[:], a.k_stride[:], a.v_stride[:], a.o_stride[:] = q.strides, k.strides, v.strides, o.strides
    return a


def _blocked_case(B, Tq, Tk, H, D, seed):
    """fp32 BTHD q, k, v (seeded random) and o, and blocked-level CPU args over them; skips when the
    library has no extension."""
    S.require_library()
    if not hasattr(_lib.library().cdll, "flashbox_attention_forward_ext"):
        S.skip("this libflashbox has no flashbox_attention_forward_ext")
    rnd = S.pseudo_random(seed)
    q, k, v, o = (S.HostTensor(s, F32) for s in ((B, Tq, H, D), (B, Tk, H, D), (B, Tk, H, D), (B, Tq, H, D)))
    for t in (q, k, v):
        t.fill(rnd)
    return q, k, v, o, _cpu_args(_lib.Impl.BLOCKED, q, k, v, o, B, Tq, Tk, H, D)


def test_cpu_forward_ext_window():
    B, Tq, Tk, H, D = 1, 6, 9, 2, 8
    q, k, v, o, a = _blocked_case(B, Tq, Tk, H, D, seed=7)
    e = _ext.default_ext()
    e.window_left, e.window_right = 2, 1
    _ext.forward_ext(a, e)
    want = _reference_window(q, k, v, B, Tq, Tk, H, D, 2, 1)
    _assert_close(o, want, Tq, H, D)
    e.window_left = -5
    with S.raises(_lib.FlashboxError, match="window_left = -5"):
        _ext.forward_ext(a, e)


def test_cpu_forward_ext_head_dim_v():
    # V and O with a head dim of their own (D = 8, Dv = 12), scores with D: through the ctypes struct's
    # head_dim_v, against plain-Python fp64 attention; o's padding stays untouched.
    S.require_library()
    if not hasattr(_lib.library().cdll, "flashbox_attention_forward_ext"):
        S.skip("this libflashbox has no flashbox_attention_forward_ext")
    B, Tq, Tk, H, D, Dv = 1, 5, 7, 2, 8, 12
    rnd = S.pseudo_random(11)
    q, k = S.HostTensor((B, Tq, H, D), F32), S.HostTensor((B, Tk, H, D), F32)
    v, o = S.HostTensor((B, Tk, H, Dv), F32, order="bht"), S.HostTensor((B, Tq, H, Dv), F32, pad=4)
    for t in (q, k, v):
        t.fill(rnd)
    a = _cpu_args(_lib.Impl.NAIVE, q, k, v, o, B, Tq, Tk, H, D)
    e = _ext.default_ext()
    e.head_dim_v = Dv
    _ext.forward_ext(a, e)
    scale = 1.0 / math.sqrt(D)
    for h in range(H):
        for i in range(Tq):
            s = [scale * sum(q.get(0, i, h, x) * k.get(0, j, h, x) for x in range(D)) for j in range(Tk)]
            m = max(s)
            p = [math.exp(x - m) for x in s]
            z = sum(p)
            for x in range(Dv):
                want = sum(pj * v.get(0, j, h, x) for j, pj in enumerate(p)) / z
                assert abs(o.get(0, i, h, x) - want) < 1e-5, (i, h, x)
    assert o.padding_intact()
    e.head_dim_v = -3
    with S.raises(_lib.FlashboxError, match="head_dim_v = -3"):
        _ext.forward_ext(a, e)


def test_cpu_forward_ext_attention_chunk():
    # Chunked local attention (chunk 3, causal through window_right = 0) through the ctypes struct's
    # attention_chunk; then a struct with seqused_k of a short batch entry: the same as a call on
    # that entry's first keys alone.
    B, Tq, Tk, H, D = 1, 7, 10, 2, 8
    q, k, v, o, a = _blocked_case(B, Tq, Tk, H, D, seed=13)
    e = _ext.default_ext()
    e.window_right, e.attention_chunk = 0, 3
    _ext.forward_ext(a, e)
    want = _reference_window(q, k, v, B, Tq, Tk, H, D, -1, 0, chunk=3)
    _assert_close(o, want, Tq, H, D)
    e.attention_chunk = -1
    with S.raises(_lib.FlashboxError, match="attention_chunk = -1"):
        _ext.forward_ext(a, e)
    used = (ctypes.c_int32 * 1)(6)
    e = _ext.default_ext()
    e.seqused_k = ctypes.cast(used, ctypes.c_void_p)
    _ext.forward_ext(a, e)
    want = _reference_window(q, k, v, B, Tq, 6, H, D, -1, -1)
    _assert_close(o, want, Tq, H, D)


def test_cpu_combine_of_two_key_ranges():
    # Attention over keys [0, 4) and [4, 10) separately, then flashbox_attention_combine: the
    # attention over all ten keys (plain-Python fp64), and its LSE.
    B, Tq, Tk, H, D = 1, 3, 10, 2, 8
    q, k, v, _, _ = _blocked_case(B, Tq, Tk, H, D, seed=17)
    if not hasattr(_lib.library().cdll, "flashbox_attention_combine"):
        S.skip("this libflashbox has no flashbox_attention_combine")
    scale = 1.0 / math.sqrt(D)
    parts = [(0, 4), (4, Tk)]
    out_p = (ctypes.c_float * (2 * Tq * H * D))()
    lse_p = (ctypes.c_float * (2 * Tq * H))()
    for s, (k0, k1) in enumerate(parts):
        for i in range(Tq):
            for h in range(H):
                sc = [scale * sum(q.get(0, i, h, x) * k.get(0, j, h, x) for x in range(D)) for j in range(k0, k1)]
                m = max(sc)
                z = sum(math.exp(x - m) for x in sc)
                lse_p[(s * Tq + i) * H + h] = m + math.log(z)
                for x in range(D):
                    out_p[((s * Tq + i) * H + h) * D + x] = sum(
                        math.exp(sj - m) * v.get(0, k0 + j, h, x) for j, sj in enumerate(sc)) / z
    out = (ctypes.c_float * (Tq * H * D))()
    lse = (ctypes.c_float * (H * Tq))()
    c = _ext.CombineArgs()
    c.device, c.out_dtype = _lib.Device.CPU, F32
    c.num_splits, c.batch, c.seqlen, c.heads, c.head_dim_v = 2, B, Tq, H, D
    c.out_partial, c.lse_partial = ctypes.addressof(out_p), ctypes.addressof(lse_p)
    c.out_partial_stride[:] = [Tq * H * D, Tq * H * D, H * D, D]
    c.lse_partial_stride[:] = [Tq * H, Tq * H, H, 1]
    c.out, c.lse = ctypes.addressof(out), ctypes.addressof(lse)
    c.out_stride[:] = [Tq * H * D, H * D, D]
    _ext.combine(c)
    for i in range(Tq):
        for h in range(H):
            sc = [scale * sum(q.get(0, i, h, x) * k.get(0, j, h, x) for x in range(D)) for j in range(Tk)]
            m = max(sc)
            z = sum(math.exp(x - m) for x in sc)
            assert abs(lse[h * Tq + i] - (m + math.log(z))) < 1e-5, (i, h)
            for x in range(D):
                want = sum(math.exp(sj - m) * v.get(0, j, h, x) for j, sj in enumerate(sc)) / z
                assert abs(out[(i * H + h) * D + x] - want) < 1e-5, (i, h, x)
    c.num_splits = 0
    with S.raises(_lib.FlashboxError, match="num_splits = 0"):
        _ext.combine(c)


if __name__ == "__main__":
    sys.exit(S.run_standalone(dict(globals())))
