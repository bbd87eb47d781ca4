"""flashbox.flash_attn_interface: FlashAttention-3's Python API on flashbox, so a model changes one import.

    from flashbox.flash_attn_interface import flash_attn_func, flash_attn_varlen_func, ...
    # instead of: from flash_attn_interface import ...   (FlashAttention-3's hopper/ module)

Names, positional order, defaults and return values are those of hopper/flash_attn_interface.py of
Dao-AILab/flash-attention as of commit 0251105a2fb19d2957484b7f023cd8c115286ced (the file itself last
changed in 14c377950125c70b7a9dabf9c561fca53715ac7d):

  flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                  v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                  pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False)
      -> out [batch, seqlen_q, nheads, headdim_v], or (out, softmax_lse [batch, nheads, seqlen_q])
  flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None, k_descale=None,
                  v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                  deterministic=False, num_heads_q=None, sm_margin=0, return_attn_probs=False)
      -> the same; qkv [batch, seqlen, 3, nheads, headdim], or [batch, seqlen, nheads_q + 2 * nheads_kv,
         headdim] with num_heads_q
  flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                  seqused_k=None, <flash_attn_func's keywords>)
      -> out [total_q, nheads, headdim_v], or (out, softmax_lse [nheads, total_q])
  flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                  cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                  cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                  q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                  window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                  scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                  return_softmax_lse=False)
      -> out, or (out, softmax_lse, out_accum, softmax_lse_accum) as FlashAttention-3 (the last two
         are empty tensors here: flashbox keeps its split partials inside the call)
  flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None) -> (out, lse [batch, seqlen, nheads])
  get_scheduler_metadata(batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv, headdim,
                  cache_seqlens, qkv_dtype=torch.bfloat16, headdim_v=None, ...) -> a small int32 tensor

Built on four torch.library custom ops over the C API (flashbox_attention_forward_ext / _backward_ext,
flashbox_attention_kvcache, flashbox_attention_combine), so autograd and torch.compile(fullgraph=True)
see one opaque node each:

  flashbox::fa3_fwd(q, k, v, qv?, cu_seqlens_q?, cu_seqlens_k?, seqused_q?, seqused_k?, q_descale?,
                    k_descale?, v_descale?, max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left,
                    window_right, attention_chunk, softcap, num_splits, deterministic) -> (out, lse)
  flashbox::fa3_bwd(dout, q, k, v, out, lse, cu_seqlens_q?, cu_seqlens_k?, seqused_q?, seqused_k?, <the
                    scalars>) -> (dq, dk, dv)
  flashbox::fa3_kvcache(q, k_cache!, v_cache!, k?, v?, qv?, ...) -> (out, lse)     (appends k/v in place)
  flashbox::fa3_combine(out_partial, lse_partial, out_dtype) -> (out, lse)

fa3_fwd is differentiable in q, k and v (FlashAttention-3's backward); a backward through a call with
qv or fp8 inputs raises NotImplementedError (FlashAttention-3 has neither).

What the library does, per device (flashbox.h, "Extension 1"; docs/migration-fa3.md):
  * CPU tensors: every field above, forward and backward (qv and fp8 forward only).
  * CUDA tensors: what the kernel families take (windows, softcap, causal, GQA, varlen; attention_chunk
    and seqused_q/k in the sm80 family), head_dim_v != head_dim (column slices of V; (192, 128)
    forward natively on Hopper), fp8 e4m3 forward with descales on Hopper (fixed length, causal or
    not, head_dim a multiple of 16 up to 256) and flash_attn_combine. qv (forward only) runs on the
    library's explicit forward (one CUDA kernel for any head dims, headdim_v a multiple of 8 up to 512;
    correct, not tuned for speed) with every mask above. fp8 with any other field is refused by the C
    API (FLASHBOX_ERR_UNSUPPORTED_IMPL), which this module raises as NotImplementedError with the
    library's message; nothing is computed another way. seqused_q/k equal to the sequences' lengths
    and an attention_chunk at least as long as every sequence's keys (when no sequence has more
    queries than keys) are dropped first, after one host read of the int32 tables, so that such calls
    keep the kernels without the mask families (the sm90 family on Hopper).
  * The KV-cache call takes qv, a v_cache whose headdim_v differs from q's headdim, and
    attention_chunk (flashbox_kvcache_args.qv / head_dim_v / attention_chunk): on CPU the row loop, on
    CUDA the explicit forward (headdim up to 576, headdim_v up to 512, multiples of 8), with appended
    k/v, rotary (q and k, never qv), paged caches, cache_leftpad and cache_batch_idx. fp8 inputs are
    refused (NotImplementedError), and so are float8_e4m3fn caches in this module (see
    flashbox.kvcache for them).

Arguments that ask nothing of the result:
  * q_descale / k_descale / v_descale with inputs that are not fp8: ignored, as FlashAttention-3 does.
  * pack_gqa: accepted and not used; how query heads share a KV head in a tile is the kernel's choice.
  * sm_margin: accepted (an int >= 0) and not used; flashbox_options.sm_margin exists, but the
    extension and KV-cache entry points take no options.
  * num_splits (flash_attn_func / _varlen_func): a schedule hint (the result is the same attention up
    to rounding). Passed to the library where it splits keys (CPU, without seqused_q/k; at most 256
    parts); otherwise the call runs as one part. In flash_attn_with_kvcache it is passed as is
    (0: the library's choice).
  * scheduler_metadata: get_scheduler_metadata returns a host int32 tensor recording the sizes it was
    asked for; flash_attn_with_kvcache checks that they match the call (ValueError otherwise) and
    schedules itself.
Head dims on CUDA that are not multiples of 8 (and at most 256) are zero-padded here for the kernels,
as flashbox.flash_attn does, when head_dim_v == head_dim without qv; the answer is exact.
A row that sees no key gets out = 0 and lse = -inf. With seqused_q, query rows past the used length
get out = 0 and lse = -inf (FlashAttention-3 leaves them unwritten).
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from . import _ext, _lib
from . import flash_attn as _fa2
from . import kvcache as _kv
from . import ops as _ops

__all__ = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
    "flash_attn_combine", "get_scheduler_metadata",
]

_WHO = "flashbox.flash_attn_interface"
_FP8 = getattr(torch, "float8_e4m3fn", None)  # torch >= 2.1
_MAX_SPLITS = 256  # the most key parts the CPU path takes in one call (flashbox.h, num_splits)
_OUT_DTYPES = {torch.float32: _lib.DType.FLOAT32, torch.float16: _lib.DType.FLOAT16,
               torch.bfloat16: _lib.DType.BFLOAT16}
_TORCH_OF = {int(code): dt for dt, code in _OUT_DTYPES.items()}
# scheduler_metadata: [tag, batch, heads_q, heads_kv, headdim, headdim_v, num_splits], int32, host memory.
_METADATA_TAG = 0x46413301  # "FA3" and a layout version, so that a stranger tensor is recognised


def _is_fp8(t: torch.Tensor) -> bool:
    return _FP8 is not None and t.dtype == _FP8


def _dtype_code(dtype: torch.dtype) -> int:
    if _FP8 is not None and dtype == _FP8:
        return _lib.DType.FLOAT8_E4M3
    if dtype not in _ops._DTYPES:
        raise TypeError(f"{_WHO}: dtype {dtype} is not supported (float16, bfloat16, float32 on CPU, "
                        f"float8_e4m3fn with descales on CPU)")
    return _ops._DTYPES[dtype]


def _c_strides(t: torch.Tensor, n: int) -> Tuple[int, ...]:
    """Element strides of t's first n dims for the C API; a dim of size 1 is never stepped, so it gets
    the tensor's whole extent (positive, overlapping nothing) whatever torch left there."""
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return tuple(t.stride(i) if t.shape[i] > 1 else extent for i in range(n))


# ---- argument checks the C API cannot make (it is given one set of sizes) ----

def _check_qkv(q, k, v, qv):
    """q [B, Tq, H, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], qv [B, Tq, H, Dv] (4-D views)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("qv", qv)):
        if t is not None and t.dim() != 4:
            raise ValueError(f"{_WHO}: {name} must be 4-D [batch, seqlen, heads, headdim], got {tuple(t.shape)}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"{_WHO}: k {tuple(k.shape)} and v {tuple(v.shape)} must agree in batch, seqlen and heads")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"{_WHO}: q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch and headdim")
    if qv is not None and qv.shape != q.shape[:3] + v.shape[3:]:
        raise ValueError(f"{_WHO}: qv must be {tuple(q.shape[:3] + v.shape[3:])} (q's rows and heads, v's "
                         f"headdim), got {tuple(qv.shape)}")
    ts = [t for t in (q, k, v, qv) if t is not None]
    if any(t.dtype != q.dtype for t in ts):
        raise TypeError(f"{_WHO}: q, k, v (and qv) must have one dtype, got {[t.dtype for t in ts]}")
    _dtype_code(q.dtype)
    if any(t.device != q.device for t in ts):
        raise ValueError(f"{_WHO}: q, k, v (and qv) must be on one device, got {[str(t.device) for t in ts]}")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{_WHO}: device {q.device} is not supported (cpu or cuda)")


def _check_int32_vector(t, name, n, device):
    if t is not None and (t.dtype != torch.int32 or t.dim() != 1 or t.numel() != n or t.device != device):
        raise ValueError(f"{_WHO}: {name} must be a 1-D int32 tensor of {n} entries on {device}, got "
                         f"{t.dtype} {tuple(t.shape)} on {t.device}")


def _descale(t, name, batch, heads_kv, device):
    """A descale as the C API takes it: fp32 on the call's device, with (batch, kv head) strides where
    a dim of size 1 broadcasts (stride 0). Returns (tensor or None, strides)."""
    if t is None:
        return None, (0, 0)
    if t.dim() != 2 or t.shape[0] not in (1, batch) or t.shape[1] not in (1, heads_kv):
        raise ValueError(f"{_WHO}: {name} must be [batch = {batch}, nheads_kv = {heads_kv}] (or broadcast from "
                         f"size 1), got {tuple(t.shape)}")
    t = t.to(device=device, dtype=torch.float32)
    return t, tuple(t.stride(i) if t.shape[i] > 1 else 0 for i in range(2))


def _splits(num_splits, device, seqused):
    """The key parts asked of the library: num_splits where it splits (CPU, no seqused), else one."""
    if device.type != "cpu" or seqused or num_splits <= 1:
        return 0
    return min(int(num_splits), _MAX_SPLITS)


def _spans(cu, n=None):
    """[(start, end)] of each sequence from int32 prefix sums (a copy to the host); None for None.
    n: the batch the call has, checked against the prefix sums' entries."""
    if cu is None:
        return None
    c = cu.to("cpu", torch.int64).tolist()
    if n is not None and len(c) != n + 1:
        raise ValueError(f"{_WHO}: cu_seqlens must have batch + 1 = {n + 1} entries, got {len(c)}")
    return list(zip(c[:-1], c[1:]))


def _host_lengths(cu):
    """Sequence lengths from int32 prefix sums (a copy to the host)."""
    return [end - start for start, end in _spans(cu)]


def _chunk_changes_nothing(chunk, q_lens, k_lens):
    """attention_chunk masks nothing where each sequence with queries and keys has no more queries than
    keys (its queries sit at key positions 0 .. k_len - 1, in one chunk) and the chunk is at least as
    long as its keys (a sequence without keys or without queries has nothing to mask)."""
    return chunk > 0 and all(q <= k and chunk >= k for q, k in zip(q_lens, k_lens) if q > 0 and k > 0)


def _drop_cuda_noops(q, k, cu_q, cu_k, su_q, su_k, chunk):
    """(seqused_q, seqused_k, attention_chunk) with those that change nothing dropped, for CUDA tensors,
    so that the call keeps the kernels without the mask families (only sm80 takes them): seqused equal to the sequences' lengths (FlashAttention-3's varlen
    test always passes seqused), and a chunk that covers every sequence's keys. Costs one host read of
    the small int32 tables, made only where the call sets them."""
    if q.device.type != "cuda" or (su_q is None and su_k is None and chunk == 0):
        return su_q, su_k, chunk
    if cu_q is not None:
        q_lens, k_lens = _host_lengths(cu_q), _host_lengths(cu_k)
    else:
        q_lens, k_lens = [q.shape[1]] * q.shape[0], [k.shape[1]] * k.shape[0]
    if su_q is not None and su_q.tolist() == q_lens:
        su_q = None
    if su_k is not None and su_k.tolist() == k_lens:
        su_k = None
    if su_q is None and su_k is None and _chunk_changes_nothing(chunk, q_lens, k_lens):
        chunk = 0
    return su_q, su_k, chunk


def _fill_ext(batch, q, v, qv, cu_q, cu_k, su_q, su_k, descales, max_q, max_k, causal, wl, wr, chunk, softcap,
              num_splits):
    """The extension struct of one forward or backward call (qv, descales and splits: forward only)."""
    e = _fa2._ext_struct(batch, cu_q, cu_k, None, max_q, max_k, causal, wl, wr, softcap)
    e.head_dim_v = v.shape[-1]
    e.attention_chunk = int(chunk)
    e.seqused_q = su_q.data_ptr() if su_q is not None else None
    e.seqused_k = su_k.data_ptr() if su_k is not None else None
    if qv is not None:
        qv_, e.qv_stride[:] = qv
        e.qv = qv_.data_ptr()
    e.num_splits = num_splits
    if _is_fp8(q) and descales is not None:
        e.out_dtype = _lib.DType.BFLOAT16  # FlashAttention-3's fp8 forward writes bf16
        for name, (t, strides) in zip(("q", "k", "v"), descales):
            setattr(e, f"{name}_descale", t.data_ptr() if t is not None else None)
            getattr(e, f"{name}_descale_stride")[:] = strides
    return e


# ---- flashbox::fa3_fwd / fa3_bwd ----

@torch.library.custom_op("flashbox::fa3_fwd", mutates_args=())
def _fa3_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qv: Optional[torch.Tensor],
             cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
             seqused_q: Optional[torch.Tensor], seqused_k: Optional[torch.Tensor],
             q_descale: Optional[torch.Tensor], k_descale: Optional[torch.Tensor], v_descale: Optional[torch.Tensor],
             max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int,
             window_right: int, attention_chunk: int, softcap: float, num_splits: int,
             deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    varlen = cu_seqlens_q is not None
    if varlen:
        _fa2._check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    q4, k4, v4 = (_fa2._as4(t, varlen) for t in (q, k, v))
    qv4 = _fa2._as4(qv, varlen) if qv is not None else None
    _check_qkv(q4, k4, v4, qv4)
    B, Tq, Hq, D = q4.shape
    Hk, Dv = k4.shape[2], v4.shape[3]
    batch = cu_seqlens_q.numel() - 1 if varlen else B
    for name, t in (("seqused_q", seqused_q), ("seqused_k", seqused_k)):
        _check_int32_vector(t, name, batch, q.device)
    seqused_q, seqused_k, attention_chunk = _drop_cuda_noops(q4, k4, cu_seqlens_q, cu_seqlens_k, seqused_q,
                                                             seqused_k, attention_chunk)
    out_dtype = torch.bfloat16 if _is_fp8(q) else q.dtype
    partial_rows = seqused_q is not None  # rows past seqused_q are not written by the library
    o = (torch.zeros if partial_rows else torch.empty)(q.shape[:-1] + (Dv,), dtype=out_dtype, device=q.device)
    lse_shape = (Hq, Tq) if varlen else (B, Hq, Tq)
    lse = torch.full(lse_shape, -math.inf, dtype=torch.float32, device=q.device) if partial_rows else \
        torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    o4 = _fa2._as4(o, varlen)
    cu_q = cu_seqlens_q.contiguous() if varlen else None
    cu_k = cu_seqlens_k.contiguous() if varlen else None
    descales = [_descale(t, n, batch, Hk, q.device) for t, n in
                ((q_descale, "q_descale"), (k_descale, "k_descale"), (v_descale, "v_descale"))]
    splits = _splits(num_splits, q.device, seqused_q is not None or seqused_k is not None)
    code = _dtype_code(q.dtype)

    def call(ts):
        (q_, qs), (k_, ks), (v_, vs) = (_ops._as_bthd(t, n) for t, n in zip(ts[:3], "qkv"))
        qv_ = _ops._as_bthd(ts[3], "qv") if qv4 is not None else None
        a = _lib.AttentionArgs()
        _ops._fill_fwd(a, q_, k_, v_, o4, lse, qs, ks, vs, _ops._as_bthd(o4, "o")[1], softmax_scale, causal, code)
        a.batch = batch
        e = _fill_ext(batch, q_, v_, qv_, cu_q, cu_k, seqused_q, seqused_k, descales, max_seqlen_q, max_seqlen_k,
                      causal, window_left, window_right, attention_chunk, softcap, splits)
        with _ops._on_device(q_):
            _fa2._call(_ext.forward_ext, a, e, who=_WHO)

    _ops._retry_contiguous(call, [q4, k4, v4] + ([qv4] if qv4 is not None else []))
    return o, lse


@_fa3_fwd.register_fake
def _fa3_fwd_fake(q, k, v, qv, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, q_descale, k_descale, v_descale,
                  max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, attention_chunk,
                  softcap, num_splits, deterministic):
    out_dtype = torch.bfloat16 if _is_fp8(q) else q.dtype
    o = q.new_empty(q.shape[:-1] + v.shape[-1:], dtype=out_dtype)
    if cu_seqlens_q is not None:
        return o, q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    B, Tq, Hq, _ = q.shape
    return o, q.new_empty((B, Hq, Tq), dtype=torch.float32)


@torch.library.custom_op("flashbox::fa3_bwd", mutates_args=())
def _fa3_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
             lse: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
             seqused_q: Optional[torch.Tensor], seqused_k: Optional[torch.Tensor], max_seqlen_q: int,
             max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int, window_right: int,
             attention_chunk: int, softcap: float,
             deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    varlen = cu_seqlens_q is not None
    q4, k4, v4, o4, do4 = (_fa2._as4(t, varlen) for t in (q, k, v, out, dout))
    _check_qkv(q4, k4, v4, None)
    if dout.shape != out.shape or out.shape != q.shape[:-1] + v.shape[-1:]:
        raise ValueError(f"{_WHO} backward: dout {tuple(dout.shape)} and out {tuple(out.shape)} must be "
                         f"{tuple(q.shape[:-1] + v.shape[-1:])}")
    batch = cu_seqlens_q.numel() - 1 if varlen else q.shape[0]
    seqused_q, seqused_k, attention_chunk = _drop_cuda_noops(q4, k4, cu_seqlens_q, cu_seqlens_k, seqused_q,
                                                             seqused_k, attention_chunk)
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    cu_q = cu_seqlens_q.contiguous() if varlen else None
    cu_k = cu_seqlens_k.contiguous() if varlen else None
    code = _dtype_code(q.dtype)  # fp8 reaches the library, which refuses it with its own message

    def call(ts):
        (q_, qs), (k_, ks), (v_, vs) = (_ops._as_bthd(t, n) for t, n in zip(ts[:3], "qkv"))
        (o_, os_), (do_, dos) = _ops._as_bthd(ts[3], "out", False), _ops._as_bthd(ts[4], "dout", False)
        lse_ = lse.contiguous()
        g = _lib.AttentionGradArgs()
        _ops._fill_fwd(g.fwd, q_, k_, v_, o_, lse_, qs, ks, vs, os_, softmax_scale, causal, code)
        g.fwd.batch = batch
        g.dout = do_.data_ptr()
        g.dout_stride[:] = dos
        g.dq, g.dk, g.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        g.dq_stride[:] = _ops._as_bthd(_fa2._as4(dq, varlen), "dq")[1]
        g.dk_stride[:] = _ops._as_bthd(_fa2._as4(dk, varlen), "dk")[1]
        g.dv_stride[:] = _ops._as_bthd(_fa2._as4(dv, varlen), "dv")[1]
        g.deterministic = 1 if deterministic else 0
        e = _fill_ext(batch, q_, v_, None, cu_q, cu_k, seqused_q, seqused_k, None, max_seqlen_q, max_seqlen_k,
                      causal, window_left, window_right, attention_chunk, softcap, 0)
        with _ops._on_device(q_):
            _fa2._call(_ext.backward_ext, g, e, who=_WHO)

    _ops._retry_contiguous(call, [q4, k4, v4, o4, do4])
    return dq, dk, dv


@_fa3_bwd.register_fake
def _fa3_bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, max_seqlen_q,
                  max_seqlen_k, softmax_scale, causal, window_left, window_right, attention_chunk, softcap,
                  deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


_N_FWD_INPUTS = 21  # fa3_fwd's arguments; the backward returns a gradient (or None) for each


def _setup_context(ctx, inputs, output):
    q, k, v, qv, cu_q, cu_k, su_q, su_k = inputs[:8]
    max_q, max_k, scale, causal, wl, wr, chunk, softcap, _splits_, deterministic = inputs[11:]
    o, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, su_q, su_k)
    ctx.scalars = (max_q, max_k, scale, causal, wl, wr, chunk, softcap, deterministic)
    ctx.no_backward = "qv" if qv is not None else ("fp8 inputs" if _is_fp8(q) else None)


def _backward(ctx, dout, dlse):
    # lse is returned to the caller (return_attn_probs) but is not differentiable: dlse is ignored.
    if ctx.no_backward is not None:
        raise NotImplementedError(f"{_WHO}: no backward for a call with {ctx.no_backward} (FlashAttention-3 has "
                                  f"none either)")
    q, k, v, o, lse, cu_q, cu_k, su_q, su_k = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashbox.fa3_bwd(dout, q, k, v, o, lse, cu_q, cu_k, su_q, su_k, *ctx.scalars)
    return (dq, dk, dv) + (None,) * (_N_FWD_INPUTS - 3)


_fa3_fwd.register_autograd(_backward, setup_context=_setup_context)
_fwd_op = torch.ops.flashbox.fa3_fwd.default


# ---- the public attention functions ----

def _check_sm_margin(sm_margin):
    if int(sm_margin) < 0:
        raise ValueError(f"{_WHO}: sm_margin must be >= 0, got {sm_margin}")


def _scale(softmax_scale, q, qv) -> float:
    """FlashAttention-3's default 1 / sqrt(headdim [+ qv's headdim]) of the caller's (unpadded) sizes."""
    if softmax_scale is None:
        return (q.shape[-1] + (qv.shape[-1] if qv is not None else 0)) ** -0.5
    return _ops._scale(softmax_scale)


def _head_dim_pad(q, v, qv) -> int:
    """The head dim the CUDA kernels are given: the next multiple of 8 for a smaller head_dim that is
    not one, when zero columns change nothing (head_dim_v == head_dim, no qv, not fp8); else head_dim."""
    d = q.shape[-1]
    if q.device.type != "cuda" or d % 8 == 0 or d > _fa2._CUDA_MAX_HEAD_DIM or v.shape[-1] != d or \
            qv is not None or _is_fp8(q):
        return d
    return _fa2._padded_head_dim(q)


def _attention(q, k, v, qv, cu_q, cu_k, su_q, su_k, max_q, max_k, softmax_scale, causal, q_descale, k_descale,
               v_descale, window_size, attention_chunk, softcap, num_splits, deterministic, sm_margin, return_lse):
    _check_sm_margin(sm_margin)
    scale = _scale(softmax_scale, q, qv)
    wl, wr = _fa2._window(window_size)
    if causal:
        wr = 0  # FlashAttention-3: causal is window_size[1] = 0
    d, dp = q.shape[-1], _head_dim_pad(q, v, qv)
    if dp != d:
        q, k, v = (F.pad(t, (0, dp - d)) for t in (q, k, v))
    out, lse = _fwd_op(q, k, v, qv, cu_q, cu_k, su_q, su_k, q_descale, k_descale, v_descale, int(max_q), int(max_k),
                       scale, bool(causal), wl, wr, int(attention_chunk), float(softcap), int(num_splits),
                       bool(deterministic))
    if dp != d:
        out = out[..., :d]
    return (out, lse) if return_lse else out


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                    pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    """q [batch, seqlen_q, nheads, headdim], k [batch, seqlen_k, nheads_k, headdim], v [batch, seqlen_k,
    nheads_k, headdim_v] -> out [batch, seqlen_q, nheads, headdim_v] (bf16 for fp8 inputs), or
    (out, softmax_lse [batch, nheads, seqlen_q]) with return_attn_probs. pack_gqa and sm_margin are
    accepted and not used; num_splits is a hint (module docstring)."""
    return _attention(q, k, v, qv, None, None, None, None, 0, 0, softmax_scale, causal, q_descale, k_descale,
                      v_descale, window_size, attention_chunk, softcap, num_splits, deterministic, sm_margin,
                      return_attn_probs)


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None, k_descale=None, v_descale=None,
                              window_size=(-1, -1), attention_chunk=0, softcap=0.0, deterministic=False,
                              num_heads_q=None, sm_margin=0, return_attn_probs=False):
    """qkv [batch, seqlen, 3, nheads, headdim], or [batch, seqlen, num_heads_q + 2 * nheads_kv, headdim]
    with num_heads_q (GQA); q, k, v are views of it (no copy) and its gradient is assembled by autograd."""
    if qkv.dim() == 5:
        if qkv.shape[-3] != 3:
            raise ValueError(f"{_WHO}: a 5-D qkv must be [batch, seqlen, 3, nheads, headdim], got {tuple(qkv.shape)}")
        q, k, v = qkv.unbind(dim=-3)
    elif qkv.dim() == 4:
        if num_heads_q is None:
            raise ValueError(f"{_WHO}: a 4-D qkv [batch, seqlen, heads, headdim] needs num_heads_q")
        heads_kv = (qkv.shape[2] - num_heads_q) // 2
        if num_heads_q <= 0 or heads_kv <= 0 or num_heads_q + 2 * heads_kv != qkv.shape[2]:
            raise ValueError(f"{_WHO}: qkv has {qkv.shape[2]} heads, not num_heads_q = {num_heads_q} plus twice a "
                             f"positive nheads_kv")
        q, k, v = qkv.split([num_heads_q, heads_kv, heads_kv], dim=-2)
    else:
        raise ValueError(f"{_WHO}: qkv must be 5-D or 4-D, got {tuple(qkv.shape)}")
    return _attention(q, k, v, None, None, None, None, None, 0, 0, softmax_scale, causal, q_descale, k_descale,
                      v_descale, window_size, attention_chunk, softcap, 1, deterministic, sm_margin,
                      return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                           v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                           pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    """q [total_q, nheads, headdim], k [total_k, nheads_k, headdim], v [total_k, nheads_k, headdim_v],
    cu_seqlens_* int32 [batch + 1]; seqused_q/k int32 [batch]: the rows of each sequence that are used.
    -> out [total_q, nheads, headdim_v], or (out, softmax_lse [nheads, total_q])."""
    return _attention(q, k, v, qv, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, max_seqlen_q, max_seqlen_k,
                      softmax_scale, causal, q_descale, k_descale, v_descale, window_size, attention_chunk, softcap,
                      num_splits, deterministic, sm_margin, return_attn_probs)


# ---- flashbox::fa3_combine ----

@torch.library.custom_op("flashbox::fa3_combine", mutates_args=())
def _fa3_combine(out_partial: torch.Tensor, lse_partial: torch.Tensor,
                 out_dtype: int) -> Tuple[torch.Tensor, torch.Tensor]:
    if out_partial.dim() != 5 or lse_partial.shape != out_partial.shape[:4]:
        raise ValueError(f"{_WHO}: out_partial must be [num_splits, batch, seqlen, nheads, headdim] and lse_partial "
                         f"[num_splits, batch, seqlen, nheads], got {tuple(out_partial.shape)} and "
                         f"{tuple(lse_partial.shape)}")
    if out_partial.dtype != torch.float32 or lse_partial.dtype != torch.float32:
        raise TypeError(f"{_WHO}: out_partial and lse_partial must be float32, got {out_partial.dtype} and "
                        f"{lse_partial.dtype}")
    if out_partial.device != lse_partial.device:
        raise ValueError(f"{_WHO}: out_partial and lse_partial must be on one device")
    op = out_partial if out_partial.stride(-1) == 1 else out_partial.contiguous()
    lp = lse_partial if all(s > 0 or n == 1 for s, n in zip(lse_partial.stride(), lse_partial.shape)) \
        else lse_partial.contiguous()
    S, B, T, H, Dv = op.shape
    dev = op.device
    out = torch.empty((B, T, H, Dv), dtype=_TORCH_OF[out_dtype], device=dev)
    lse = torch.empty((B, H, T), dtype=torch.float32, device=dev)
    c = _ext.CombineArgs()
    c.device = _lib.Device.CUDA if dev.type == "cuda" else _lib.Device.CPU
    c.out_dtype = out_dtype
    c.num_splits, c.batch, c.seqlen, c.heads, c.head_dim_v = S, B, T, H, Dv
    c.out_partial, c.out_partial_stride[:] = op.data_ptr(), _c_strides(op, 4)
    c.lse_partial, c.lse_partial_stride[:] = lp.data_ptr(), _c_strides(lp, 4)
    c.out, c.out_stride[:] = out.data_ptr(), _c_strides(out, 3)
    c.lse = lse.data_ptr()
    c.stream = _ops._stream_of(op)
    with _ops._on_device(op):
        _fa2._call(_ext.combine, c, who=_WHO)
    return out, lse


@_fa3_combine.register_fake
def _fa3_combine_fake(out_partial, lse_partial, out_dtype):
    S, B, T, H, Dv = out_partial.shape
    return (out_partial.new_empty((B, T, H, Dv), dtype=_TORCH_OF[out_dtype]),
            out_partial.new_empty((B, H, T), dtype=torch.float32))


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """The attention over all keys from per-split results: out_partial fp32 [num_splits, batch, seqlen,
    nheads, headdim], lse_partial fp32 [num_splits, batch, seqlen, nheads] (natural log; -inf: the split
    saw no key). -> (out [batch, seqlen, nheads, headdim] in out_dtype (default fp32, or out's dtype),
    lse fp32 [batch, seqlen, nheads], a view of a [batch, nheads, seqlen] tensor as FlashAttention-3's).
    `out`, when given, receives the result and is returned."""
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else out_partial.dtype
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"{_WHO}: out_dtype must be float32, float16 or bfloat16, got {out_dtype}")
    if out is not None and (out.dtype != out_dtype or out.shape != out_partial.shape[1:]):
        raise ValueError(f"{_WHO}: out must be {out_dtype} {tuple(out_partial.shape[1:])}, got {out.dtype} "
                         f"{tuple(out.shape)}")
    res, lse = torch.ops.flashbox.fa3_combine(out_partial, lse_partial, int(_OUT_DTYPES[out_dtype]))
    if out is not None:
        out.copy_(res)
        res = out
    return res, lse.transpose(1, 2)


# ---- get_scheduler_metadata ----

def get_scheduler_metadata(batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv, headdim,
                           cache_seqlens: torch.Tensor, qkv_dtype=torch.bfloat16, headdim_v=None,
                           cu_seqlens_q: Optional[torch.Tensor] = None, cu_seqlens_k_new: Optional[torch.Tensor] = None,
                           cache_leftpad: Optional[torch.Tensor] = None, page_size: Optional[int] = None,
                           max_seqlen_k_new=0, causal=False, window_size=(-1, -1), attention_chunk=0,
                           has_softcap=False, num_splits=0, pack_gqa=None, sm_margin=0):
    """FlashAttention-3's precomputed schedule for flash_attn_with_kvcache. flashbox schedules inside the
    call, so this returns the sizes it was asked for, an int32 host tensor [tag, batch_size, num_heads_q,
    num_heads_kv, headdim, headdim_v, num_splits], which flash_attn_with_kvcache(scheduler_metadata=...)
    checks against its own arguments (ValueError on a mismatch). The other arguments are accepted and
    not used."""
    headdim_v = headdim if headdim_v is None else headdim_v
    return torch.tensor([_METADATA_TAG, batch_size, num_heads_q, num_heads_kv, headdim, headdim_v, num_splits],
                        dtype=torch.int32)


def _check_metadata(meta, batch, heads_q, heads_kv, headdim, headdim_v):
    if meta is None:
        return
    got = meta.tolist() if meta.dim() == 1 and meta.numel() == 7 else None
    if got is None or got[0] != _METADATA_TAG:
        raise ValueError(f"{_WHO}: scheduler_metadata is not a tensor get_scheduler_metadata returned")
    want = [batch, heads_q, heads_kv, headdim, headdim_v]
    if got[1:6] != want:
        names = "batch_size, num_heads_q, num_heads_kv, headdim, headdim_v"
        raise ValueError(f"{_WHO}: scheduler_metadata was made for ({names}) = {tuple(got[1:6])}, this call has "
                         f"{tuple(want)}")


# ---- flashbox::fa3_kvcache ----

def _gather_pages(cache, table):
    """[num_blocks, page_size, H, D] pages listed by table [B, nblocks] -> a contiguous [B, nblocks *
    page_size, H, D] copy, each entry's keys in order."""
    b, nb = table.shape
    return cache.index_select(0, table.reshape(-1).long()).reshape(b, nb * cache.shape[1], *cache.shape[2:])


def _scatter_pages(cache, gathered, table):
    """The inverse of _gather_pages: the copy's rows written back into the pages (appended keys)."""
    cache.index_copy_(0, table.reshape(-1).long(), gathered.reshape(-1, *cache.shape[1:]))


def _kv_call(q, kc, vc, k, v, qv, cos, sin, seqlens, idx, leftpad, table, scale, causal, window, chunk, softcap,
             interleaved, num_splits):
    """One flashbox_attention_kvcache call (through flashbox.kvcache, which pads CUDA head dims) ->
    (out [B, Tq, H, Dv], lse [B, H, Tq])."""
    def call():
        return _kv.flash_attn_with_kvcache(q, kc, vc, k, v, cos, sin, seqlens, idx, leftpad, table, scale, causal,
                                           window, softcap, interleaved, None, num_splits, True, qv=qv,
                                           attention_chunk=chunk)
    return _fa2._call(call, who=_WHO)


def _kv_per_sequence(q, kc, vc, k, v, qv, cos, sin, seqlens, idx, leftpad, table, cu_q, cu_k_new, scale, causal,
                     window, chunk, softcap, interleaved, num_splits):
    """Variable-length queries or new keys: one call per sequence (the KV-cache call takes a batch of
    equal lengths). A sequence with no query row but new keys still appends them (through a one-row
    query whose output is dropped)."""
    batch = seqlens.numel()
    q_spans, k_spans = _spans(cu_q, batch), _spans(cu_k_new, batch)
    heads = q.shape[-2]
    lse_shape = (heads, q.shape[0]) if q_spans is not None else (q.shape[0], heads, q.shape[1])
    out = q.new_zeros(q.shape[:-1] + vc.shape[-1:])
    lse = torch.full(lse_shape, -math.inf, dtype=torch.float32, device=q.device)
    for b in range(batch):
        q_b = q[q_spans[b][0]:q_spans[b][1]].unsqueeze(0) if q_spans is not None else q[b:b + 1]
        qv_b = None
        if qv is not None:
            qv_b = qv[q_spans[b][0]:q_spans[b][1]].unsqueeze(0) if q_spans is not None else qv[b:b + 1]
        k_b = v_b = None
        if k is not None:
            lo, hi = k_spans[b] if k_spans is not None else (None, None)
            k_b = k[lo:hi].unsqueeze(0) if k_spans is not None else k[b:b + 1]
            v_b = v[lo:hi].unsqueeze(0) if k_spans is not None else v[b:b + 1]
            if k_b.shape[1] == 0:
                k_b = v_b = None
        rows = q_b.shape[1]
        if rows == 0 and k_b is None:
            continue
        if rows == 0:
            q_b = q.new_zeros((1, 1) + q.shape[-2:])
            qv_b = None if qv is None else qv.new_zeros((1, 1) + qv.shape[-2:])
        sel = slice(b, b + 1)
        # A one-entry call reads cache entry 0 unless told: a contiguous cache without cache_batch_idx
        # (the caller's, or the contiguous copy of paged caches) names entry b here.
        if idx is not None:
            idx_b = idx[sel]
        elif table is None:
            idx_b = torch.full((1,), b, dtype=torch.int32, device=seqlens.device)
        else:
            idx_b = None
        o_b, l_b = _kv_call(q_b, kc, vc, k_b, v_b, qv_b, cos, sin, seqlens[sel], idx_b,
                            leftpad[sel] if leftpad is not None else None, table[sel] if table is not None else None,
                            scale, causal, window, chunk, softcap, interleaved, num_splits)
        if rows == 0:
            continue
        if q_spans is not None:
            lo, hi = q_spans[b]
            out[lo:hi], lse[:, lo:hi] = o_b[0], l_b[0]
        else:
            out[b], lse[b] = o_b[0], l_b[0]
    return out, lse


@torch.library.custom_op("flashbox::fa3_kvcache", mutates_args=("k_cache", "v_cache"))
def _fa3_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: Optional[torch.Tensor],
                 v: Optional[torch.Tensor], qv: Optional[torch.Tensor], rotary_cos: Optional[torch.Tensor],
                 rotary_sin: Optional[torch.Tensor],
                 cache_seqlens: Optional[torch.Tensor], cache_batch_idx: Optional[torch.Tensor],
                 cache_leftpad: Optional[torch.Tensor], page_table: Optional[torch.Tensor],
                 cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k_new: Optional[torch.Tensor],
                 rotary_seqlens: Optional[torch.Tensor], scheduler_metadata: Optional[torch.Tensor],
                 softmax_scale: float, causal: bool, window_left: int, window_right: int, attention_chunk: int,
                 softcap: float, rotary_interleaved: bool, num_splits: int) -> Tuple[torch.Tensor, torch.Tensor]:
    varlen = cu_seqlens_q is not None or cu_seqlens_k_new is not None
    if varlen and cache_seqlens is None:
        raise ValueError(f"{_WHO}: cache_seqlens is required with cu_seqlens_q or cu_seqlens_k_new")
    batch = cache_seqlens.numel() if cache_seqlens is not None else q.shape[0]
    _check_metadata(scheduler_metadata, batch, q.shape[-2], k_cache.shape[2], q.shape[-1], v_cache.shape[-1])
    if rotary_seqlens is not None and rotary_cos is not None and cache_seqlens is not None and \
            not torch.equal(rotary_seqlens.to(cache_seqlens.device, torch.int32), cache_seqlens.to(torch.int32)):
        raise NotImplementedError(f"{_WHO}: rotary_seqlens other than cache_seqlens (flashbox_attention_kvcache "
                                  f"rotates new key i at cache_seqlens + i)")
    if page_table is not None and cache_batch_idx is not None:
        # FlashAttention-3: cache_batch_idx picks the page-table row of each batch entry.
        page_table, cache_batch_idx = page_table.index_select(0, cache_batch_idx.long()), None
    # Paged caches whose page size is not a multiple of 16 (the library's unit) run on a contiguous
    # copy of each entry's pages; appended keys are written back into the pages afterwards.
    copied = page_table is not None and k_cache.shape[1] % 16 != 0
    if copied:
        kc, vc, table = _gather_pages(k_cache, page_table), _gather_pages(v_cache, page_table), None
    else:
        kc, vc, table = k_cache, v_cache, page_table
    window = (window_left, window_right)
    if varlen:
        out, lse = _kv_per_sequence(q, kc, vc, k, v, qv, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                    cache_leftpad, table, cu_seqlens_q, cu_seqlens_k_new, softmax_scale, causal,
                                    window, attention_chunk, softcap, rotary_interleaved, num_splits)
    else:
        out, lse = _kv_call(q, kc, vc, k, v, qv, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                            cache_leftpad, table, softmax_scale, causal, window, attention_chunk, softcap,
                            rotary_interleaved, num_splits)
    if copied and k is not None:
        _scatter_pages(k_cache, kc, page_table)
        _scatter_pages(v_cache, vc, page_table)
    return out, lse


@_fa3_kvcache.register_fake
def _fa3_kvcache_fake(q, k_cache, v_cache, k, v, qv, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                      cache_leftpad, page_table, cu_seqlens_q, cu_seqlens_k_new, rotary_seqlens, scheduler_metadata,
                      softmax_scale, causal, window_left, window_right, attention_chunk, softcap, rotary_interleaved,
                      num_splits):
    out_shape = q.shape[:-1] + v_cache.shape[-1:]
    if cu_seqlens_q is not None:
        return q.new_empty(out_shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    B, Tq, H, _ = q.shape
    return q.new_empty(out_shape), q.new_empty((B, H, Tq), dtype=torch.float32)


def _kvcache_refusals(q, v_cache, qv):
    """What flashbox_kvcache_args has no field for: NotImplementedError naming it (both devices).
    Descales without fp8 inputs are ignored, as FlashAttention-3 ignores them. qv and headdim_v are
    checked against q here (the C API sees one call's sizes)."""
    if qv is not None and (qv.dim() != q.dim() or qv.shape[:-1] != q.shape[:-1] or
                           qv.shape[-1] != v_cache.shape[-1] or qv.dtype != q.dtype or qv.device != q.device):
        raise ValueError(f"{_WHO}: qv must be {tuple(q.shape[:-1] + v_cache.shape[-1:])} of {q.dtype} on "
                         f"{q.device} (q's rows and heads, v_cache's headdim), got {tuple(qv.shape)} of {qv.dtype} "
                         f"on {qv.device}")
    if _is_fp8(q):
        what = "fp8 inputs"
    elif _is_fp8(v_cache):
        # The C API takes e4m3 caches (flashbox_kvcache_args.cache_dtype, k_descale, v_descale) and so does
        # flashbox.kvcache.flash_attn_with_kvcache(..., k_descale=, v_descale=); this custom op's schema has
        # no descales yet.
        raise NotImplementedError(f"{_WHO}.flash_attn_with_kvcache: float8_e4m3fn caches are not wired here yet; "
                                  f"call flashbox.kvcache.flash_attn_with_kvcache(q, k_cache, v_cache, ..., "
                                  f"k_descale=, v_descale=) (FlashAttention-3's descale semantics)")
    else:
        return
    raise NotImplementedError(f"{_WHO}.flash_attn_with_kvcache: {what} is not supported (flashbox_attention_kvcache "
                              f"has no such field)")


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False):
    """FlashAttention-3's decode call: q [batch, seqlen_q, nheads, headdim] (or [total_q, nheads, headdim]
    with cu_seqlens_q) against k_cache/v_cache [batch_cache, seqlen_cache, nheads_k, headdim(_v)] or pages
    [num_blocks, page_size, nheads_k, headdim(_v)] with page_table [batch, max_blocks] int32; qv (like q
    with headdim_v) adds qv . v to the scores (the default scale is then 1 / sqrt(headdim + headdim_v));
    out has headdim_v; k/v (or with
    cu_seqlens_k_new their packed rows) are appended in place at cache_seqlens first, rotated by
    rotary_cos/rotary_sin when given. -> out like q, or (out, softmax_lse, out_accum, softmax_lse_accum)
    with return_softmax_lse (lse [batch, nheads, seqlen_q], or [nheads, total_q]; the accumulators are
    empty). No backward (as FlashAttention-3)."""
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError(f"{_WHO}: k_cache and v_cache must have a contiguous last dimension")
    if (k is None) != (v is None):
        raise ValueError(f"{_WHO}: give both k and v (the new keys and values), or neither")
    _kvcache_refusals(q, v_cache, qv)
    _check_sm_margin(sm_margin)
    scale = _scale(softmax_scale, q, qv)
    wl, wr = _fa2._window(window_size)
    if causal:  # FlashAttention-3: causal is window_size[1] = 0, so causal with window_size[0] left keys
        wr = 0 if wl >= 0 else -1
    if isinstance(cache_seqlens, int):
        batch = q.shape[0] if cu_seqlens_q is None else cu_seqlens_q.numel() - 1
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=k_cache.device)
    out, lse = torch.ops.flashbox.fa3_kvcache(q, k_cache, v_cache, k, v, qv, rotary_cos, rotary_sin, cache_seqlens,
                                              cache_batch_idx, cache_leftpad, page_table, cu_seqlens_q,
                                              cu_seqlens_k_new, rotary_seqlens, scheduler_metadata, scale,
                                              bool(causal), wl, wr, int(attention_chunk), float(softcap),
                                              bool(rotary_interleaved), int(num_splits))
    if not return_softmax_lse:
        return out
    empty = torch.empty(0, dtype=torch.float32, device=out.device)
    return out, lse, empty, empty.clone()
