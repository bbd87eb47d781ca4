"""flashbox.flash_attn: FlashAttention-2's public functions on flashbox, so a model changes one import.

    from flashbox.flash_attn import flash_attn_func, flash_attn_varlen_func, ...

Same names, same positional order and defaults as flash_attn 2.6+ (flash_attn_interface.py):
flash_attn_func, flash_attn_qkvpacked_func, flash_attn_kvpacked_func, flash_attn_varlen_func,
flash_attn_varlen_qkvpacked_func, flash_attn_varlen_kvpacked_func, with softmax_scale, causal,
window_size, softcap, alibi_slopes, deterministic and return_attn_probs (-> (out, softmax_lse, None):
the LSE is [batch, nheads, seqlen_q], or [nheads, total_q] for varlen, as FlashAttention-2's).
flash_attn_func and flash_attn_varlen_func also take `learnable_sink` (FlashAttention-4's keyword;
gpt-oss's attention sinks): None, or one logit per query head, [nheads], that joins every row's softmax
denominator as a column with no value (flashbox_attention_ext.learnable_sink); differentiable.

Built on two torch.library custom ops over the C API's extension entry points
(flashbox_attention_forward_ext / _backward_ext), so autograd and torch.compile(fullgraph=True) see one
opaque node each:

  flashbox::fa2_fwd(q, k, v, cu_seqlens_q?, cu_seqlens_k?, alibi_slopes?, max_seqlen_q, max_seqlen_k,
                    softmax_scale, causal, window_left, window_right, softcap, deterministic,
                    learnable_sink?) -> (o, lse)
  flashbox::fa2_bwd(dout, q, k, v, o, lse, <the same>) -> (dq, dk, dv, dsink)

learnable_sink is fp32 [heads_q] on q's device; dsink is its gradient, fp32 [heads_q] (an empty [0]
tensor when there is no sink: a custom op's outputs are tensors).

What flashbox does not do is an error, never a silent wrong answer:
  * dropout_p != 0 raises NotImplementedError (flashbox has no attention dropout);
  * sliding windows, softcap, ALiBi (per head or per batch x head), varlen and deterministic go to the
    C API on CPU and CUDA tensors alike (on CUDA the sm80 kernels take them all, forward and backward;
    README "Feature matrix"); what the library refuses as unsupported becomes NotImplementedError;
  * head dims: the CUDA kernels take every multiple of 8 up to 256 as is; any other head_dim <= 256
    is zero-padded here to the next multiple of 8 (as FlashAttention-2's own wrapper does), with the
    scale of the true head_dim. Zero columns add nothing to q.k and give zero output columns, which
    are cut off, so the answer is exact; the backward flows through the pad. head_dim > 256 on CUDA
    raises NotImplementedError. CPU tensors take any head_dim 1..576 as is.
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from . import _ext, _lib
from . import ops as _ops

__all__ = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
]

from .kvcache import flash_attn_with_kvcache  # noqa: E402  (FlashAttention-2's decode entry point)


_CUDA_MAX_HEAD_DIM = 256  # multiples of 8 up to this run as they are on CUDA
_NOT_THERE = (_lib.ErrorCode.UNSUPPORTED_IMPL, _lib.ErrorCode.UNSUPPORTED_HEAD_DIM)


def _call(fn, *args, who="flashbox.flash_attn"):
    """fn(*args), a C API call; what flashbox does not implement becomes NotImplementedError (message
    kept, prefixed by `who`, the Python module the caller used). Returns what fn returns."""
    try:
        return fn(*args)
    except _lib.FlashboxError as e:
        if e.code in _NOT_THERE:
            raise NotImplementedError(f"{who}: {e}") from e
        raise


def _as4(t: torch.Tensor, varlen: bool) -> torch.Tensor:
    """[total, heads, head_dim] as [1, total, heads, head_dim] (the C API's view of varlen tensors)."""
    return t.unsqueeze(0) if varlen else t


def _check_varlen(q, k, v, cu_q, cu_k):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"flashbox.flash_attn: varlen {name} must be 3-D [total, heads, head_dim], got "
                             f"shape {tuple(t.shape)}")
    for name, t in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if t.dtype != torch.int32 or t.dim() != 1 or t.device != q.device:
            raise ValueError(f"flashbox.flash_attn: {name} must be a 1-D int32 tensor on {q.device}, got "
                             f"{t.dtype} {tuple(t.shape)} on {t.device}")
    if cu_q.numel() != cu_k.numel() or cu_q.numel() < 2:
        raise ValueError(f"flashbox.flash_attn: cu_seqlens_q and cu_seqlens_k must both have batch + 1 >= 2 "
                         f"entries, got {cu_q.numel()} and {cu_k.numel()}")


def _ext_struct(batch, cu_q, cu_k, alibi, max_q, max_k, causal, wl, wr, softcap, sink=None, dsink=None):
    e = _ext.default_ext()
    e.window_left, e.window_right = int(wl), (0 if causal else int(wr))
    e.softcap = float(softcap)
    if sink is not None:
        e.learnable_sink = sink.data_ptr()
    if dsink is not None:
        e.dsink = dsink.data_ptr()
    if alibi is not None:
        e.alibi_slopes = alibi.data_ptr()
        e.alibi_batch_stride = alibi.stride(0) if alibi.dim() == 2 else 0
    if cu_q is not None:
        e.cu_seqlens_q, e.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
        e.max_seqlen_q, e.max_seqlen_k = int(max_q), int(max_k)
    return e


def _prepare_slopes(alibi, q, batch, heads):
    if alibi is None:
        return None
    if alibi.dtype != torch.float32 or alibi.device != q.device or \
            tuple(alibi.shape) not in ((heads,), (batch, heads)):
        raise ValueError(f"flashbox.flash_attn: alibi_slopes must be float32 [{heads}] or [{batch}, {heads}] on "
                         f"{q.device}, got {alibi.dtype} {tuple(alibi.shape)} on {alibi.device}")
    return alibi.contiguous()


def _prepare_sink(sink, q, heads):
    if sink is None:
        return None
    if sink.dtype != torch.float32 or sink.device != q.device or tuple(sink.shape) != (heads,):
        raise ValueError(f"flashbox.flash_attn: learnable_sink must be float32 [{heads}] on {q.device}, got "
                         f"{sink.dtype} {tuple(sink.shape)} on {sink.device}")
    return sink.contiguous()


@torch.library.custom_op("flashbox::fa2_fwd", mutates_args=())
def _fa2_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
             cu_seqlens_k: Optional[torch.Tensor], alibi_slopes: Optional[torch.Tensor], max_seqlen_q: int,
             max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int, window_right: int,
             softcap: float, deterministic: bool,
             learnable_sink: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    varlen = cu_seqlens_q is not None
    if varlen:
        _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    q4, k4, v4 = _as4(q, varlen), _as4(k, varlen), _as4(v, varlen)
    _ops._check_inputs(q4, k4, v4)
    B, Tq, Hq, D = q4.shape
    batch = cu_seqlens_q.numel() - 1 if varlen else B
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((Hq, Tq) if varlen else (B, Hq, Tq), dtype=torch.float32, device=q.device)
    o4 = _as4(o, varlen)
    slopes = _prepare_slopes(alibi_slopes, q, batch, Hq)
    sink = _prepare_sink(learnable_sink, q, Hq)
    cu_q = cu_seqlens_q.contiguous() if varlen else None
    cu_k = cu_seqlens_k.contiguous() if varlen else None

    def call(ts):
        (q_, qs), (k_, ks), (v_, vs) = (_ops._as_bthd(t, n) for t, n in zip(ts, "qkv"))
        a = _lib.AttentionArgs()
        _ops._fill_fwd(a, q_, k_, v_, o4, lse, qs, ks, vs, _ops._as_bthd(o4, "o")[1], softmax_scale, causal)
        a.batch = batch
        e = _ext_struct(batch, cu_q, cu_k, slopes, max_seqlen_q, max_seqlen_k, causal, window_left, window_right,
                        softcap, sink)
        with _ops._on_device(q_):
            _call(_ext.forward_ext, a, e)

    _ops._retry_contiguous(call, [q4, k4, v4])
    return o, lse


@_fa2_fwd.register_fake
def _fa2_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, max_seqlen_q, max_seqlen_k, softmax_scale,
                  causal, window_left, window_right, softcap, deterministic, learnable_sink):
    if cu_seqlens_q is not None:
        return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    B, Tq, Hq, D = q.shape
    return q.new_empty(q.shape), q.new_empty((B, Hq, Tq), dtype=torch.float32)


@torch.library.custom_op("flashbox::fa2_bwd", mutates_args=())
def _fa2_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             lse: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
             alibi_slopes: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
             causal: bool, window_left: int, window_right: int, softcap: float, deterministic: bool,
             learnable_sink: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    varlen = cu_seqlens_q is not None
    q4, k4, v4 = _as4(q, varlen), _as4(k, varlen), _as4(v, varlen)
    _ops._check_inputs(q4, k4, v4)
    if dout.shape != q.shape or o.shape != q.shape:
        raise ValueError(f"flashbox.flash_attn backward: dout {tuple(dout.shape)} and o {tuple(o.shape)} must "
                         f"have q's shape {tuple(q.shape)}")
    batch = cu_seqlens_q.numel() - 1 if varlen else q.shape[0]
    dq, dk, dv = torch.empty_like(q, memory_format=torch.contiguous_format), \
        torch.empty_like(k, memory_format=torch.contiguous_format), \
        torch.empty_like(v, memory_format=torch.contiguous_format)
    slopes = _prepare_slopes(alibi_slopes, q, batch, q4.shape[2])
    sink = _prepare_sink(learnable_sink, q, q4.shape[2])
    # The C API writes every dsink entry (a sum over the batch), so torch.empty is enough.
    dsink = torch.empty((q4.shape[2] if sink is not None else 0,), dtype=torch.float32, device=q.device)
    cu_q = cu_seqlens_q.contiguous() if varlen else None
    cu_k = cu_seqlens_k.contiguous() if varlen else None

    def call(ts):
        (q_, qs), (k_, ks), (v_, vs) = (_ops._as_bthd(t, n) for t, n in zip(ts[:3], "qkv"))
        (o_, os_), (do_, dos) = _ops._as_bthd(ts[3], "o", False), _ops._as_bthd(ts[4], "dout", False)
        lse_ = lse.contiguous()
        g = _lib.AttentionGradArgs()
        _ops._fill_fwd(g.fwd, q_, k_, v_, o_, lse_, qs, ks, vs, os_, softmax_scale, causal)
        g.fwd.batch = batch
        g.dout = do_.data_ptr()
        g.dout_stride[:] = dos
        g.dq, g.dk, g.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        g.dq_stride[:] = _ops._as_bthd(_as4(dq, varlen), "dq")[1]
        g.dk_stride[:] = _ops._as_bthd(_as4(dk, varlen), "dk")[1]
        g.dv_stride[:] = _ops._as_bthd(_as4(dv, varlen), "dv")[1]
        g.deterministic = 1 if deterministic else 0
        e = _ext_struct(batch, cu_q, cu_k, slopes, max_seqlen_q, max_seqlen_k, causal, window_left, window_right,
                        softcap, sink, dsink if sink is not None else None)
        with _ops._on_device(q_):
            _call(_ext.backward_ext, g, e)

    _ops._retry_contiguous(call, [q4, k4, v4, _as4(o, varlen), _as4(dout, varlen)])
    return dq, dk, dv, dsink


@_fa2_bwd.register_fake
def _fa2_bwd_fake(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, max_seqlen_q, max_seqlen_k,
                  softmax_scale, causal, window_left, window_right, softcap, deterministic, learnable_sink):
    heads = learnable_sink.shape[0] if learnable_sink is not None else 0
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), \
        q.new_empty((heads,), dtype=torch.float32)


_OPTS = ("cu_seqlens_q", "cu_seqlens_k", "alibi_slopes", "max_seqlen_q", "max_seqlen_k", "softmax_scale", "causal",
         "window_left", "window_right", "softcap", "deterministic", "learnable_sink")


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    o, lse = output
    ctx.mark_non_differentiable(lse)
    cu_q, cu_k, alibi = inputs[3:6]
    sink = inputs[-1]
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, alibi, sink)
    ctx.scalars = inputs[6:-1]


def _backward(ctx, dout, dlse):
    # lse is returned to the caller (return_attn_probs) but is not differentiable: dlse is ignored.
    q, k, v, o, lse, cu_q, cu_k, alibi, sink = ctx.saved_tensors
    dq, dk, dv, dsink = torch.ops.flashbox.fa2_bwd(dout, q, k, v, o, lse, cu_q, cu_k, alibi, *ctx.scalars, sink)
    # Gradients in the forward op's input order: q, k, v, then _OPTS (no gradient), then learnable_sink.
    return (dq, dk, dv) + (None,) * (len(_OPTS) - 1) + (dsink if sink is not None else None,)


_fa2_fwd.register_autograd(_backward, setup_context=_setup_context)
_fwd_op = torch.ops.flashbox.fa2_fwd.default


def _window(window_size) -> Tuple[int, int]:
    # FlashAttention-2's tests pass a 2-element tensor; int() of each works for tuples and tensors.
    left, right = (int(w) for w in window_size)
    return left, right


def _padded_head_dim(t: torch.Tensor) -> int:
    d = t.shape[-1]
    if t.device.type != "cuda":
        return d
    if d <= _CUDA_MAX_HEAD_DIM:
        return (d + 7) // 8 * 8
    raise NotImplementedError(f"flashbox.flash_attn: head_dim = {d} is not supported on cuda (the kernels take "
                              f"multiples of 8 up to {_CUDA_MAX_HEAD_DIM}; smaller head dims are padded to them)")


def _attn(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
          deterministic, return_attn_probs, learnable_sink=None):
    if dropout_p != 0.0:
        raise NotImplementedError(f"flashbox.flash_attn: dropout_p = {dropout_p} is not supported (flashbox has "
                                  f"no attention dropout); pass dropout_p = 0.0")
    d = q.shape[-1]
    if k.shape[-1] != d or v.shape[-1] != d:
        raise ValueError(f"flashbox.flash_attn: q, k, v must share head_dim, got {d}, {k.shape[-1]}, {v.shape[-1]}")
    scale = _ops._scale(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(d)
    wl, wr = _window(window_size)
    if causal:
        wr = 0  # FlashAttention-2: causal means window_size[1] = 0
    dp = _padded_head_dim(q)
    if dp != d:
        q, k, v = (F.pad(t, (0, dp - d)) for t in (q, k, v))
    if learnable_sink is not None:
        # fp32 on q's device, as the C API reads it; the conversion is differentiable, so the gradient
        # reaches a bf16 parameter too.
        learnable_sink = learnable_sink.to(device=q.device, dtype=torch.float32)
    o, lse = _fwd_op(q, k, v, cu_q, cu_k, alibi_slopes, int(max_q), int(max_k), scale, bool(causal), wl, wr,
                     float(softcap), bool(deterministic), learnable_sink)
    if dp != d:
        o = o[..., :d]
    return (o, lse, None) if return_attn_probs else o


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    """q [batch, seqlen_q, nheads, headdim], k, v [batch, seqlen_k, nheads_k, headdim] -> out like q.
    learnable_sink: None or [nheads] (module docstring)."""
    return _attn(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                 deterministic, return_attn_probs, learnable_sink)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv [batch, seqlen, 3, nheads, headdim]; q, k, v are strided views of it (no copy)."""
    q, k, v = qkv.unbind(2)
    return _attn(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                 deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q [batch, seqlen_q, nheads, headdim], kv [batch, seqlen_k, 2, nheads_k, headdim]."""
    k, v = kv.unbind(2)
    return _attn(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                 deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, learnable_sink=None):
    """q [total_q, nheads, headdim], k, v [total_k, nheads_k, headdim], cu_seqlens_* int32 [batch + 1].
    learnable_sink: None or [nheads] (module docstring; not with block_table)."""
    if block_table is not None:
        if learnable_sink is not None:
            raise NotImplementedError("flashbox.flash_attn: learnable_sink with block_table (a paged cache) is not "
                                      "wired in this function yet; pass learnable_sink=None")
        # A paged cache: k, v are [num_blocks, page_size, nheads_k, headdim] and sequence b's keys the
        # first cu_seqlens_k[b + 1] - cu_seqlens_k[b] rows of its pages (forward only, as in FA2).
        import torch

        from .kvcache import varlen_paged_attention
        res = varlen_paged_attention(q, k, v, cu_seqlens_q, block_table,
                                     (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32), softmax_scale,
                                     causal, window_size, softcap, alibi_slopes, 0, return_attn_probs)
        return (res[0], res[1], None) if return_attn_probs else res
    return _attn(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                 window_size, softcap, alibi_slopes, deterministic, return_attn_probs, learnable_sink)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv [total, 3, nheads, headdim], cu_seqlens int32 [batch + 1]."""
    q, k, v = qkv.unbind(1)
    return _attn(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                 window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q [total_q, nheads, headdim], kv [total_k, 2, nheads_k, headdim]."""
    k, v = kv.unbind(1)
    return _attn(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                 window_size, softcap, alibi_slopes, deterministic, return_attn_probs)
