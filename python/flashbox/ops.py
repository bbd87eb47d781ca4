"""PyTorch entry points: flashbox.attention and flashbox.flash_attn_func.

Both go through two torch.library custom ops, so autograd, torch.compile(fullgraph=True) and CUDA
graph capture see one opaque node each:

  flashbox::attention_fwd(q, k, v, softmax_scale, causal, deterministic) -> (o, lse)
  flashbox::attention_bwd(dout, q, k, v, o, lse, softmax_scale, causal, deterministic) -> (dq, dk, dv)

The real kernels call the C API on torch's current CUDA stream (CPU tensors: the CPU
implementation) and never synchronise the host, so they can be captured into a CUDA graph. The fake
(meta) kernels describe the outputs only: o is a contiguous [B, Tq, Hq, D] tensor of q's dtype, lse a
contiguous [B, Hq, Tq] fp32 tensor; dq/dk/dv are contiguous tensors shaped like q/k/v.

`deterministic` does not change the forward; it is an argument of the forward op so that autograd can
hand it to the backward (FlashAttention-2's flash_attn_func has the same flag).
"""

import math
import warnings
from typing import Optional, Tuple

import torch

from . import _lib
from ._device import on_device as _on_device

if not hasattr(torch.library, "custom_op") or not hasattr(torch.library, "register_fake"):
    raise ImportError(f"flashbox.attention needs torch >= 2.4 (torch.library.custom_op); this is torch "
                      f"{torch.__version__}")

__all__ = ["attention", "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func"]

_DTYPES = {
    torch.float32: _lib.DType.FLOAT32,
    torch.float16: _lib.DType.FLOAT16,
    torch.bfloat16: _lib.DType.BFLOAT16,
}

_copy_warned = set()


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, devices=("cpu", "cuda")) -> None:
    """What the C API cannot see (it is given one set of sizes): shapes agree across q, k, v; one
    dtype; one device. Everything else (head_dim, dtype per device, GQA ratio) the C API checks."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"flashbox: {name} must be 4-D [batch, seq, heads, head_dim], got shape "
                             f"{tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"flashbox: k and v must have the same shape, got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"flashbox: q and k must have the same batch size, got {q.shape[0]} and "
                         f"{k.shape[0]}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"flashbox: q and k must have the same head_dim, got {q.shape[3]} and "
                         f"{k.shape[3]}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"flashbox: q, k, v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in _DTYPES:
        raise TypeError(f"flashbox: dtype {q.dtype} is not supported (float32 on CPU; float16 or "
                        f"bfloat16 on CPU and CUDA)")
    if not (q.device == k.device == v.device):
        raise ValueError(f"flashbox: q, k, v must be on one device, got {q.device}, {k.device}, "
                         f"{v.device}")
    if q.device.type not in devices:
        raise ValueError(f"flashbox: device {q.device} is not supported (cpu or cuda)")


def _as_bthd(t: torch.Tensor, name: str, warn: bool = True) -> Tuple[torch.Tensor, Tuple[int, int, int]]:
    """The tensor as the C API takes it, with its (batch, seq, head) strides in elements.

    The C API needs head_dim contiguous and positive strides (no broadcast dimension); anything else is
    copied with .contiguous(), with a once-per-process warning for the inputs a caller controls (a copy
    per call costs time and memory); autograd's dout is often a broadcast and is copied silently.
    A dimension of size 1 is never stepped, so its stride (which torch leaves arbitrary) is replaced by
    the tensor's whole extent: positive, and overlapping nothing.
    """
    size, stride = t.shape, t.stride()
    if stride[3] != 1 or any(stride[i] <= 0 and size[i] > 1 for i in range(3)):
        if warn and name not in _copy_warned:
            _copy_warned.add(name)
            warnings.warn(f"flashbox: {name} with strides {tuple(stride)} is not a layout the C API takes "
                          f"(head_dim must be contiguous, no broadcast dimensions); copying it with "
                          f".contiguous() on every such call", stacklevel=3)
        t = t.contiguous()
        size, stride = t.shape, t.stride()
    extent = 1 + sum((size[i] - 1) * stride[i] for i in range(4))
    return t, tuple(stride[i] if size[i] > 1 else extent for i in range(3))


def _stream_of(t: torch.Tensor):
    if t.device.type != "cuda":
        return None
    return torch.cuda.current_stream(t.device).cuda_stream


def _fill_fwd(a: _lib.AttentionArgs, q, k, v, o, lse, qs, ks, vs, os_, softmax_scale, causal, dtype=None) -> None:
    """The plain arguments of one call; dtype: the flashbox dtype of q, k, v when it is not one of
    _DTYPES (fp8 e4m3, which only the extension call takes)."""
    a.device = _lib.Device.CUDA if q.device.type == "cuda" else _lib.Device.CPU
    a.dtype = _DTYPES[q.dtype] if dtype is None else dtype
    a.impl = _lib.Impl.AUTO
    a.batch, a.seqlen_q, a.heads_q, a.head_dim = q.shape
    a.seqlen_k, a.heads_kv = k.shape[1], k.shape[2]
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    a.q_stride[:] = qs
    a.k_stride[:] = ks
    a.v_stride[:] = vs
    a.o_stride[:] = os_
    a.softmax_scale = softmax_scale
    a.causal = 1 if causal else 0
    a.stream = _stream_of(q)


def _retry_contiguous(call, tensors):
    """Run call(tensors); when the C API rejects a strided layout (BAD_STRIDE, MISALIGNED: a slice whose
    offset breaks the kernel's vector alignment), run it again once on contiguous copies."""
    try:
        return call(tensors)
    except _lib.FlashboxError as e:
        if e.code not in (_lib.ErrorCode.BAD_STRIDE, _lib.ErrorCode.MISALIGNED) or \
                all(t.is_contiguous() for t in tensors):
            raise
        return call([t.contiguous() for t in tensors])


@torch.library.custom_op("flashbox::attention_fwd", mutates_args=())
def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float, causal: bool,
                   deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    _check_inputs(q, k, v)
    B, Tq, Hq, D = q.shape
    o = torch.empty((B, Tq, Hq, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Tq), dtype=torch.float32, device=q.device)
    os_ = (Tq * Hq * D, Hq * D, D)

    def call(qkv):
        (q_, qs), (k_, ks), (v_, vs) = (_as_bthd(t, n) for t, n in zip(qkv, "qkv"))
        a = _lib.AttentionArgs()
        _fill_fwd(a, q_, k_, v_, o, lse, qs, ks, vs, os_, softmax_scale, causal)
        with _on_device(q_):
            _lib.forward(a)

    _retry_contiguous(call, [q, k, v])
    return o, lse


@_attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, softmax_scale, causal, deterministic):
    _check_inputs(q, k, v, devices=("cpu", "cuda", "meta"))   # also the op's meta kernel
    B, Tq, Hq, D = q.shape
    return q.new_empty((B, Tq, Hq, D)), q.new_empty((B, Hq, Tq), dtype=torch.float32)


@torch.library.custom_op("flashbox::attention_bwd", mutates_args=())
def _attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                   lse: torch.Tensor, softmax_scale: float, causal: bool,
                   deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_inputs(q, k, v)
    if dout.shape != o.shape or o.shape != q.shape:
        raise ValueError(f"flashbox backward: dout {tuple(dout.shape)} and o {tuple(o.shape)} must have "
                         f"q's shape {tuple(q.shape)}")
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)

    def call(ts):
        (q_, qs), (k_, ks), (v_, vs) = (_as_bthd(t, n) for t, n in zip(ts[:3], "qkv"))
        (o_, os_), (do_, dos) = _as_bthd(ts[3], "o", False), _as_bthd(ts[4], "dout", False)
        lse_ = lse.contiguous()   # kept alive until the call returns
        g = _lib.AttentionGradArgs()
        _fill_fwd(g.fwd, q_, k_, v_, o_, lse_, qs, ks, vs, os_, softmax_scale, causal)
        g.dout = do_.data_ptr()
        g.dout_stride[:] = dos
        g.dq, g.dk, g.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        g.dq_stride[:] = _as_bthd(dq, "dq")[1]
        g.dk_stride[:] = _as_bthd(dk, "dk")[1]
        g.dv_stride[:] = _as_bthd(dv, "dv")[1]
        g.deterministic = 1 if deterministic else 0
        with _on_device(q_):
            _lib.backward(g)

    _retry_contiguous(call, [q, k, v, o, dout])
    return dq, dk, dv


@_attention_bwd.register_fake
def _attention_bwd_fake(dout, q, k, v, o, lse, softmax_scale, causal, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, softmax_scale, causal, deterministic = inputs
    o, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.softmax_scale, ctx.causal, ctx.deterministic = softmax_scale, causal, deterministic


def _backward(ctx, dout, dlse):
    # lse is marked non-differentiable (attention() does not return it), so dlse is always zero.
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashbox.attention_bwd(dout, q, k, v, o, lse, ctx.softmax_scale, ctx.causal,
                                                  ctx.deterministic)
    return dq, dk, dv, None, None, None


_attention_fwd.register_autograd(_backward, setup_context=_setup_context)

_fwd_op = torch.ops.flashbox.attention_fwd.default


def _scale(softmax_scale: Optional[float]) -> float:
    if softmax_scale is None:
        return 0.0  # the C API's "1/sqrt(head_dim)"
    s = float(softmax_scale)
    if not (0.0 < s < math.inf):   # also false for NaN; plain comparisons trace cleanly in dynamo
        raise ValueError(f"flashbox: softmax_scale must be a positive finite number, got {softmax_scale}")
    return s


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              softmax_scale: Optional[float] = None) -> torch.Tensor:
    """softmax(q kᵀ · scale [+ causal mask]) v for [batch, seq, heads, head_dim] tensors.

    CUDA tensors: float16/bfloat16; CPU tensors: float32/float16/bfloat16 (the CPU implementation).
    GQA/MQA when k/v have fewer heads than q (a divisor of q's). Causal is bottom-right aligned
    (query i sees keys j <= i + Tk - Tq). softmax_scale defaults to 1/sqrt(head_dim).
    Returns o, contiguous [B, Tq, Hq, D]. Differentiable in q, k, v.
    """
    o, _ = _fwd_op(q, k, v, _scale(softmax_scale), bool(causal), False)
    return o


def _reject_unsupported(dropout_p, causal, window_size, alibi_slopes, softcap, return_attn_probs):
    """FlashAttention-2 options flashbox does not implement: an error, never silently ignored."""
    if dropout_p != 0.0:
        raise NotImplementedError(f"flashbox.flash_attn_func: dropout_p={dropout_p} is not supported "
                                  f"(flashbox has no attention dropout); pass dropout_p=0.0")
    win = tuple(window_size)
    if not (win == (-1, -1) or (causal and win == (-1, 0))):
        raise NotImplementedError(f"flashbox.flash_attn_func: window_size={win} (local / sliding-window "
                                  f"attention) is not supported; pass window_size=(-1, -1)")
    if alibi_slopes is not None:
        raise NotImplementedError("flashbox.flash_attn_func: alibi_slopes is not supported; pass "
                                  "alibi_slopes=None")
    if softcap != 0.0:
        raise NotImplementedError(f"flashbox.flash_attn_func: softcap={softcap} is not supported; pass "
                                  f"softcap=0.0")
    if return_attn_probs:
        raise NotImplementedError("flashbox.flash_attn_func: return_attn_probs=True is not supported "
                                  "(it returns the dropout pattern, and flashbox has no dropout)")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, softcap=0.0):
    """FlashAttention-2's flash_attn_func(q, k, v, ...) on flashbox.

    Same layout ([batch, seqlen, nheads, headdim]), same defaults, same bottom-right causal mask, GQA/MQA
    by head counts, softmax_scale default 1/sqrt(headdim), `deterministic` passed to the backward.
    Options flashbox does not implement raise NotImplementedError instead of being ignored: dropout,
    sliding windows, ALiBi, softcapping and return_attn_probs. (`softcap` is accepted by keyword as
    flash-attn >= 2.6 names it.)
    """
    _reject_unsupported(dropout_p, causal, window_size, alibi_slopes, softcap, return_attn_probs)
    o, _ = _fwd_op(q, k, v, _scale(softmax_scale), bool(causal), bool(deterministic))
    return o


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              alibi_slopes=None, deterministic=False, return_attn_probs=False, softcap=0.0):
    """FlashAttention-2's packed form: qkv [batch, seqlen, 3, nheads, headdim]. q, k, v are strided views
    of it (no copy)."""
    _reject_unsupported(dropout_p, causal, window_size, alibi_slopes, softcap, return_attn_probs)
    q, k, v = qkv.unbind(2)
    o, _ = _fwd_op(q, k, v, _scale(softmax_scale), bool(causal), bool(deterministic))
    return o


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             alibi_slopes=None, deterministic=False, return_attn_probs=False, softcap=0.0):
    """FlashAttention-2's packed form: q [batch, seqlen_q, nheads, headdim], kv [batch, seqlen_k, 2,
    nheads_k, headdim]. k, v are strided views of kv (no copy)."""
    _reject_unsupported(dropout_p, causal, window_size, alibi_slopes, softcap, return_attn_probs)
    k, v = kv.unbind(2)
    o, _ = _fwd_op(q, k, v, _scale(softmax_scale), bool(causal), bool(deterministic))
    return o
