"""flash_attn_with_kvcache on flashbox_attention_kvcache (FlashAttention-2's decode entry point).

`KvcacheArgs` mirrors `flashbox_kvcache_args` of include/flashbox/flashbox.h field for field (same
order, same C types). `flash_attn_with_kvcache` takes torch tensors with FlashAttention's argument
names and meanings (q [batch, seqlen_q, heads_q, d]; k_cache/v_cache [batch_cache, max_seqlen,
heads_kv, d] or paged [num_blocks, page_size, heads_kv, d] with block_table [batch, max_blocks] int32;
cache_seqlens int or int32 [batch]; k/v appended in place at cache_seqlens before attending; rotary_cos/
rotary_sin [seqlen_ro >= capacity, rotary_dim / 2] turn q and the new k) and runs on torch's current
stream. ALiBi slopes are [heads] or [batch, heads]. On CUDA a head_dim that is not a multiple of 8 is
zero-padded to the next one here (q, the caches and the new keys are copied; appended keys are written
back into the caller's caches), so the kernels see 16-byte rows. A row that sees no key gets o = 0 and
lse = -inf (flashbox's convention; FlashAttention-2 returns +inf there).
An fp8 cache (k_cache/v_cache of torch.float8_e4m3fn, q and k/v in bfloat16 or float16) takes the
keyword arguments k_descale/v_descale (FlashAttention-3's names): float32 [batch, heads_kv], a dim of
size 1 broadcasting, None for 1.0; the cache holds k / k_descale in e4m3 and appended k/v are quantized
on write (flashbox_kvcache_args.cache_dtype). On CUDA its head_dim must be a multiple of 16 (no padding
copy is made of an fp8 cache).
FlashAttention-3's keywords qv (a second query against V, [batch, seqlen_q, heads, headdim_v]: scores
scale * (q . k + qv . v), the default scale 1 / sqrt(headdim + headdim_v)) and attention_chunk, and a
v_cache (and v) whose head dim differs from q's (out then has v's head dim) are taken too
(flashbox_kvcache_args.qv / head_dim_v / attention_chunk); on CUDA they run on the explicit forward.

`prepare_kvcache(...)` fills the argument struct once and returns it with a `call()` that only runs
the C function: the benchmark times that, so Python's per-call work is not measured.
"""

from __future__ import annotations

import ctypes

from . import _lib

__all__ = ["KvcacheArgs", "flash_attn_with_kvcache", "prepare_kvcache", "kvcache_num_splits", "varlen_paged_attention"]

_I64x3 = ctypes.c_int64 * 3
_P = ctypes.c_void_p


class KvcacheArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("device", ctypes.c_int), ("dtype", ctypes.c_int),
        ("batch", ctypes.c_int64), ("seqlen_q", ctypes.c_int64), ("heads_q", ctypes.c_int64),
        ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
        ("q", _P), ("q_stride", _I64x3),
        ("k_cache", _P), ("v_cache", _P),
        ("k_cache_stride", _I64x3), ("v_cache_stride", _I64x3),
        ("cache_entries", ctypes.c_int64), ("cache_rows", ctypes.c_int64),
        ("cache_seqlens", _P),
        ("block_table", _P), ("max_blocks_per_seq", ctypes.c_int64), ("block_table_stride", ctypes.c_int64),
        ("cache_batch_idx", _P),
        ("cache_leftpad", _P),
        ("k_new", _P), ("v_new", _P), ("seqlen_new", ctypes.c_int64),
        ("k_new_stride", _I64x3), ("v_new_stride", _I64x3),
        ("o", _P), ("o_stride", _I64x3),
        ("lse", _P),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("has_window", ctypes.c_int), ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", _P),
        ("num_splits", ctypes.c_int),
        ("tables_trusted", ctypes.c_int),
        ("rotary_cos", _P), ("rotary_sin", _P), ("rotary_dim", ctypes.c_int64), ("rotary_interleaved", ctypes.c_int),
        ("stream", _P),
        ("alibi_batch_stride", ctypes.c_int64),
        ("learnable_sink", _P),
        ("cache_dtype", ctypes.c_int),
        ("k_descale", _P), ("v_descale", _P),
        ("k_descale_stride", ctypes.c_int64 * 2), ("v_descale_stride", ctypes.c_int64 * 2),
        ("qv", _P), ("qv_stride", _I64x3), ("head_dim_v", ctypes.c_int64), ("attention_chunk", ctypes.c_int64),
    ]


def _is_fp8(t):
    import torch
    fp8 = getattr(torch, "float8_e4m3fn", None)
    return fp8 is not None and t.dtype == fp8


def _fn(name, restype=ctypes.c_int):
    f = getattr(_lib.library().cdll, name)
    f.restype = restype
    f.argtypes = [ctypes.POINTER(KvcacheArgs)]
    return f


def _strides(t, name):
    """Element strides of dims 0..2 for the C API (head_dim contiguous; a size-1 dim gets the extent)."""
    if t.dim() != 4:
        raise ValueError(f"{name} must be 4-D, got shape {tuple(t.shape)}")
    if t.stride(3) != 1 and t.shape[3] > 1:
        t = t.contiguous()
    size, stride = t.shape, t.stride()
    extent = 1 + sum((size[i] - 1) * stride[i] for i in range(4))
    return t, tuple(stride[i] if size[i] > 1 else extent for i in range(3))


def _int32(t, device, name):
    import torch
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a tensor")
    if t.dtype != torch.int32 or t.device != device or not t.is_contiguous():
        t = t.to(device=device, dtype=torch.int32).contiguous()
    return t


class PreparedKvcache:
    """A filled KvcacheArgs and the tensors it points at (kept alive); call() runs the C function."""

    def __init__(self, args, keep, out, lse):
        self.args, self._keep, self.out, self.lse = args, keep, out, lse
        self._call = _fn("flashbox_attention_kvcache")
        self._ref = ctypes.byref(self.args)
        self._cuda = args.device == _lib.Device.CUDA
        if self._cuda:
            import torch
            self._torch = torch

    def call(self):
        if self._cuda:  # the stream current now (CUDA graph capture runs on its own stream)
            self.args.stream = self._torch.cuda.current_stream().cuda_stream
        rc = self._call(self._ref)
        if rc != 0:
            raise _lib.FlashboxError(rc, _lib.last_error())

    def num_splits(self) -> int:
        n = _fn("flashbox_kvcache_num_splits")(ctypes.byref(self.args))
        if n < 0:
            raise _lib.FlashboxError(-n, _lib.last_error())
        return n


def prepare_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                    cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                    return_softmax_lse=False, *, tables_trusted=False, out=None, k_descale=None, v_descale=None,
                    qv=None, attention_chunk=0):
    import torch
    from .ops import _DTYPES  # torch dtype -> flashbox dtype

    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("give both rotary_cos and rotary_sin, or neither")
    if (k is None) != (v is None):
        raise ValueError("give both k and v (the new keys and values), or neither")
    dev = q.device
    a = KvcacheArgs()
    a.struct_size = ctypes.sizeof(KvcacheArgs)
    a.device = _lib.Device.CUDA if dev.type == "cuda" else _lib.Device.CPU
    if q.dtype not in _DTYPES:
        raise TypeError(f"q.dtype {q.dtype} is not supported")
    a.dtype = _DTYPES[q.dtype]
    fp8 = _is_fp8(k_cache)
    if fp8 != _is_fp8(v_cache):
        raise TypeError(f"k_cache is {k_cache.dtype} and v_cache {v_cache.dtype}: give both in one dtype")
    if not fp8 and (k_descale is not None or v_descale is not None):
        raise ValueError("k_descale/v_descale dequantize an fp8 (float8_e4m3fn) cache; this cache is "
                         f"{k_cache.dtype}")
    q, qs = _strides(q, "q")
    k_cache_s = _strides(k_cache, "k_cache")[1]
    v_cache_s = _strides(v_cache, "v_cache")[1]
    if k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("k_cache and v_cache must have a contiguous last dimension (they are written in place)")
    a.batch, a.seqlen_q, a.heads_q, a.head_dim = q.shape
    a.heads_kv = k_cache.shape[2]
    dv = v_cache.shape[3]
    if dv != a.head_dim:
        a.head_dim_v = dv
    a.q, a.q_stride[:] = q.data_ptr(), qs
    if qv is not None:
        if qv.dtype != q.dtype or qv.device != dev:
            raise TypeError(f"qv must be {q.dtype} on {dev} like q, got {qv.dtype} on {qv.device}")
        qv, qvs = _strides(qv, "qv")
        a.qv, a.qv_stride[:] = qv.data_ptr(), qvs
    a.attention_chunk = int(attention_chunk)
    a.k_cache, a.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
    a.k_cache_stride[:], a.v_cache_stride[:] = k_cache_s, v_cache_s
    a.cache_entries, a.cache_rows = k_cache.shape[0], k_cache.shape[1]
    keep = [q, k_cache, v_cache, qv]
    block_table = _int32(block_table, dev, "block_table")
    if block_table is not None:
        a.block_table = block_table.data_ptr()
        a.max_blocks_per_seq = block_table.shape[1]
        a.block_table_stride = block_table.stride(0) if block_table.shape[0] > 1 else block_table.shape[1]
        capacity = block_table.shape[1] * k_cache.shape[1]
    else:
        capacity = k_cache.shape[1]
    if cache_seqlens is None:
        cache_seqlens = capacity - (k.shape[1] if k is not None else 0)
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((a.batch,), cache_seqlens, dtype=torch.int32, device=dev)
    cache_seqlens = _int32(cache_seqlens, dev, "cache_seqlens")
    a.cache_seqlens = cache_seqlens.data_ptr()
    cache_batch_idx = _int32(cache_batch_idx, dev, "cache_batch_idx")
    cache_leftpad = _int32(cache_leftpad, dev, "cache_leftpad")
    a.cache_batch_idx = cache_batch_idx.data_ptr() if cache_batch_idx is not None else None
    a.cache_leftpad = cache_leftpad.data_ptr() if cache_leftpad is not None else None
    keep += [block_table, cache_seqlens, cache_batch_idx, cache_leftpad]
    if k is not None:
        k, ks = _strides(k, "k")
        v, vs = _strides(v, "v")
        a.k_new, a.v_new, a.seqlen_new = k.data_ptr(), v.data_ptr(), k.shape[1]
        a.k_new_stride[:], a.v_new_stride[:] = ks, vs
        keep += [k, v]
    if out is None:
        out = torch.empty(q.shape[:-1] + (dv,), dtype=q.dtype, device=dev)
    out_t, os_ = _strides(out, "out")
    if out_t.data_ptr() != out.data_ptr():
        raise ValueError("out must have a contiguous last dimension")
    a.o, a.o_stride[:] = out.data_ptr(), os_
    lse = torch.empty((a.batch, a.heads_q, a.seqlen_q), dtype=torch.float32, device=dev) if return_softmax_lse else None
    a.lse = lse.data_ptr() if lse is not None else None
    a.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    a.causal = 1 if causal else 0
    wl, wr = int(window_size[0]), int(window_size[1])  # FA2's tests pass 0-d tensors
    if wl >= 0 or wr >= 0:
        a.has_window, a.window_left, a.window_right = 1, wl, wr
    a.softcap = float(softcap)
    if alibi_slopes is not None:
        alibi_slopes = alibi_slopes.to(device=dev, dtype=torch.float32).contiguous()
        if alibi_slopes.dim() == 2:  # [batch, heads]: one row per batch entry
            if tuple(alibi_slopes.shape) != (a.batch, a.heads_q):
                raise ValueError(f"alibi_slopes is {tuple(alibi_slopes.shape)}; give [heads] or [batch, heads]")
            a.alibi_batch_stride = a.heads_q
        a.alibi_slopes = alibi_slopes.data_ptr()
        keep.append(alibi_slopes)
    if rotary_cos is not None:
        if rotary_cos.shape != rotary_sin.shape or rotary_cos.dim() != 2:
            raise ValueError("rotary_cos and rotary_sin must both be [seqlen_ro, rotary_dim / 2]")
        if rotary_cos.shape[0] < capacity:
            raise ValueError(f"rotary_cos has {rotary_cos.shape[0]} rows; the cache holds {capacity} keys per sequence")
        rotary_cos = rotary_cos.to(device=dev, dtype=q.dtype).contiguous()
        rotary_sin = rotary_sin.to(device=dev, dtype=q.dtype).contiguous()
        a.rotary_cos, a.rotary_sin = rotary_cos.data_ptr(), rotary_sin.data_ptr()
        a.rotary_dim, a.rotary_interleaved = 2 * rotary_cos.shape[1], 1 if rotary_interleaved else 0
        keep += [rotary_cos, rotary_sin]
    if fp8:
        a.cache_dtype = _lib.DType.FLOAT8_E4M3
        for name, t in (("k_descale", k_descale), ("v_descale", v_descale)):
            if t is None:
                continue
            if t.dim() != 2 or t.shape[0] not in (1, a.batch) or t.shape[1] not in (1, a.heads_kv):
                raise ValueError(f"{name} must be [batch = {a.batch}, heads_kv = {a.heads_kv}] (or broadcast from "
                                 f"size 1), got {tuple(t.shape)}")
            t = t.to(device=dev, dtype=torch.float32)
            setattr(a, name, t.data_ptr())
            getattr(a, f"{name}_stride")[:] = tuple(t.stride(i) if t.shape[i] > 1 else 0 for i in range(2))
            keep.append(t)
    a.num_splits = int(num_splits)
    a.tables_trusted = 1 if tables_trusted else 0
    a.stream = torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else None
    return PreparedKvcache(a, keep, out, lse)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            *, tables_trusted=False, out=None, k_descale=None, v_descale=None, qv=None,
                            attention_chunk=0):
    """FlashAttention-2's flash_attn_with_kvcache on flashbox; returns out, or (out, softmax_lse).
    qv and attention_chunk (keywords) are FlashAttention-3's; v_cache may have its own head dim."""
    d = q.shape[-1]
    if _is_fp8(k_cache) or _is_fp8(v_cache):  # no padded copy of an fp8 cache: the C API names the rule
        p = prepare_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                            cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
                            rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse,
                            tables_trusted=tables_trusted, out=out, k_descale=k_descale, v_descale=v_descale,
                            qv=qv, attention_chunk=attention_chunk)  # the C API refuses qv / chunk with fp8
        p.call()
        return (p.out, p.lse) if return_softmax_lse else p.out
    # Zero columns change nothing only when V has q's head dim and there is no qv (qv . v would see them).
    if q.device.type == "cuda" and d % 8 != 0 and v_cache.shape[-1] == d and qv is None:
        return _padded_head_dim(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
                                rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse, tables_trusted, out,
                                attention_chunk)
    p = prepare_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                        cache_leftpad, block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved,
                        alibi_slopes, num_splits, return_softmax_lse, tables_trusted=tables_trusted, out=out, qv=qv,
                        attention_chunk=attention_chunk)
    p.call()
    return (p.out, p.lse) if return_softmax_lse else p.out


def _padded_head_dim(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
                     block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved, alibi_slopes,
                     num_splits, return_softmax_lse, tables_trusted, out, attention_chunk=0):
    """A CUDA head_dim that is not a multiple of 8: the call on zero-padded copies (zeros add nothing to
    q.k and give zero output columns), the appended keys written back into the caller's caches."""
    import torch.nn.functional as F

    d = q.shape[-1]
    pad = (0, (-d) % 8)
    kc, vc = F.pad(k_cache, pad), F.pad(v_cache, pad)
    res = flash_attn_with_kvcache(F.pad(q, pad), kc, vc, None if k is None else F.pad(k, pad),
                                  None if v is None else F.pad(v, pad), rotary_cos, rotary_sin, cache_seqlens,
                                  cache_batch_idx, cache_leftpad, block_table,
                                  d ** -0.5 if softmax_scale is None else softmax_scale, causal, window_size, softcap,
                                  rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse,
                                  tables_trusted=tables_trusted, attention_chunk=attention_chunk)
    if k is not None:  # the append wrote into the padded copies
        k_cache.copy_(kc[..., :d])
        v_cache.copy_(vc[..., :d])
    o, lse = res if return_softmax_lse else (res, None)
    o = o[..., :d].contiguous()
    if out is not None:
        out.copy_(o)
        o = out
    return (o, lse) if return_softmax_lse else o


def kvcache_num_splits(*args, **kwargs) -> int:
    """The split count the library chooses for these flash_attn_with_kvcache arguments."""
    return prepare_kvcache(*args, **kwargs).num_splits()


def varlen_paged_attention(q, k_cache, v_cache, cu_seqlens_q, block_table, seqused_k, softmax_scale=None,
                           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, num_splits=0,
                           return_softmax_lse=False):
    """Variable-length queries against a paged cache (FlashAttention-2's varlen forward with a
    block_table): q [total_q, heads_q, d] with int32 cu_seqlens_q [batch + 1]; sequence b's keys are the
    first seqused_k[b] of the pages block_table[b]. One flash_attn_with_kvcache call per sequence (its
    lengths are read on the host), so every mask and split option means what it means there.
    Returns out [total_q, heads_q, d] (and lse [heads_q, total_q])."""
    import torch

    cu = cu_seqlens_q.to("cpu", torch.int64).tolist()
    out = torch.empty_like(q)
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device) if return_softmax_lse else None
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue
        slopes = alibi_slopes[b] if alibi_slopes is not None and alibi_slopes.dim() == 2 else alibi_slopes
        res = flash_attn_with_kvcache(q[lo:hi].unsqueeze(0), k_cache, v_cache, cache_seqlens=seqused_k[b:b + 1],
                                      block_table=block_table[b:b + 1], softmax_scale=softmax_scale, causal=causal,
                                      window_size=window_size, softcap=softcap, alibi_slopes=slopes,
                                      num_splits=num_splits, return_softmax_lse=return_softmax_lse)
        o, l = res if return_softmax_lse else (res, None)
        out[lo:hi] = o[0]
        if lse is not None:
            lse[:, lo:hi] = l[0]
    return (out, lse) if return_softmax_lse else out
