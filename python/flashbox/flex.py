"""flashbox.flex_attention: FlexAttention's signature on flashbox's kernels.

    from flashbox.flex import flex_attention          # instead of torch.nn.attention.flex_attention's
    out = flex_attention(q, k, v, block_mask=create_block_mask(mask_mod, B, H, Tq, Tk))

[B, H, T, D] tensors as FlexAttention takes them (handed to the C API through permuted strides, no
copy), GQA with enable_gqa=True, return_lse (natural log, [B, Hq, Tq], -inf where a row sees no key),
autograd, and torch.compile(fullgraph=True): the attention is two torch.library custom ops,

  flashbox::flex_fwd(q, k, v, <the BlockMask's eight tables>, q_block, kv_block, mod, scale) -> (o, lse)
  flashbox::flex_bwd(dout, q, k, v, o, lse, <tables>, q_block, kv_block, mod, scale) -> (dq, dk, dv)

with fake implementations for tracing. A BlockMask is taken as it is (its tables as flashbox_block_mask,
batch / heads 1 broadcast). Its mask_mod, which FlexAttention applies in partial blocks, runs as one of
flashbox's built-in mask families where flashbox.flex_families recognises it in the traced graph
(causal, sliding windows, documents, prefix-LM, chunks, and their combinations: the ext's fields, checked
against the mask_mod on sample points per call shape; the BlockMask's tables are dropped where they add
nothing to the family), else it is translated to CUDA C++ (flashbox.flex_translate) and compiled with
NVRTC once per function. The ops carry it as an integer key into this process's registry (its captured
tensors are bound from there, per call); last_route() says which path the last call took.

Refused, with an error that says why (never a silently different answer): score_mod (no flashbox
kernel applies a score mod yet), a mask_mod on CPU that is not a built-in family (it runs as GPU
code), a mask_mod that cannot be translated, gradients through the returned lse (the C backward takes
no lse gradient), and return_aux's max_scores. kernel_options are FlexAttention's Triton tuning hints
and are ignored.

Needs torch >= 2.5 (torch.library.custom_op, register_fake); flashbox.flex_translate,
flashbox.flex_families and flashbox._flex_core work with older torch.
"""

# No `from __future__ import annotations` here: torch.library.custom_op reads the annotations as types.
from typing import Optional, Tuple

import torch

if not hasattr(torch.library, "custom_op") or not hasattr(torch.library, "register_fake"):
    raise ImportError(f"flashbox.flex_attention needs torch >= 2.5 (torch.library.custom_op and "
                      f"register_fake); this is torch {torch.__version__}. flashbox.flex_translate (the "
                      f"mask_mod translator) works with torch >= 1.13.")

from . import _flex_core as core  # noqa: E402

__all__ = ["flex_attention", "last_route"]


def last_route(which: str = "forward"):
    """How this process's last flex_attention forward ("forward") or backward ("backward") ran its mask:
    a flashbox._flex_core.Route (kind "none", "blocks", "family" with the family's name, or "mod"), or
    None before the first call."""
    return core.last_route(which)

_T = Optional[torch.Tensor]


@torch.library.custom_op("flashbox::flex_fwd", mutates_args=())
def _flex_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              kv_num_blocks: _T, kv_indices: _T, full_kv_num_blocks: _T, full_kv_indices: _T,
              q_num_blocks: _T, q_indices: _T, full_q_num_blocks: _T, full_q_indices: _T,
              q_block_size: int, kv_block_size: int, mod_key: int,
              scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    tables = [kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
              q_num_blocks, q_indices, full_q_num_blocks, full_q_indices]
    return core.forward(q, k, v, tables, q_block_size, kv_block_size, mod_key, scale)


@_flex_fwd.register_fake
def _flex_fwd_fake(q, k, v, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, q_num_blocks,
                   q_indices, full_q_num_blocks, full_q_indices, q_block_size, kv_block_size, mod_key, scale):
    B, Hq, Tq, _ = q.shape
    return q.new_empty((B, Hq, Tq, v.shape[3])), q.new_empty((B, Hq, Tq), dtype=torch.float32)


@torch.library.custom_op("flashbox::flex_bwd", mutates_args=())
def _flex_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
              lse: torch.Tensor,
              kv_num_blocks: _T, kv_indices: _T, full_kv_num_blocks: _T, full_kv_indices: _T,
              q_num_blocks: _T, q_indices: _T, full_q_num_blocks: _T, full_q_indices: _T,
              q_block_size: int, kv_block_size: int, mod_key: int,
              scale: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    tables = [kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
              q_num_blocks, q_indices, full_q_num_blocks, full_q_indices]
    return core.backward(dout, q, k, v, o, lse, tables, q_block_size, kv_block_size, mod_key, scale)


@_flex_bwd.register_fake
def _flex_bwd_fake(dout, q, k, v, o, lse, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
                   q_num_blocks, q_indices, full_q_num_blocks, full_q_indices, q_block_size, kv_block_size,
                   mod_key, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    tables = inputs[3:11]
    ctx.q_block_size, ctx.kv_block_size, ctx.mod_key, ctx.scale = inputs[11:15]
    o, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, o, lse, *tables)


def _backward(ctx, dout, dlse):
    # lse is marked non-differentiable: the C backward takes no lse gradient (see the module's doc).
    q, k, v, o, lse, *tables = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashbox.flex_bwd(dout, q, k, v, o, lse, *tables, ctx.q_block_size,
                                             ctx.kv_block_size, ctx.mod_key, ctx.scale)
    return (dq, dk, dv) + (None,) * 12


_flex_fwd.register_autograd(_backward, setup_context=_setup_context)
_fwd_op = torch.ops.flashbox.flex_fwd.default


def _constant_result(fn):
    """torch.compile runs fn once while tracing and keeps its (int) result as a constant, so that the
    translation and NVRTC compile of a mask_mod happen outside the graph."""
    deco = getattr(getattr(torch, "compiler", None), "assume_constant_result", None)
    if deco is None:
        try:
            import torch._dynamo as _dynamo
            deco = _dynamo.assume_constant_result
        except (ImportError, AttributeError):
            return fn
    return deco(fn)


@_constant_result
def _mask_mod_key(mask_mod, device) -> int:
    return core.mask_mod_key(mask_mod, device)


def _scale(scale) -> float:
    if scale is None:
        return 0.0   # the C API's 1/sqrt(head_dim), FlexAttention's default too
    s = float(scale)
    if not (0.0 < s < float("inf")):
        raise ValueError(f"flashbox.flex_attention: scale must be a positive finite number, got {scale} "
                         f"(FlexAttention takes any float; flashbox's kernels take a positive one)")
    return s


_SCORE_MOD_ERROR = (
    "score_mod is not supported by flashbox's kernels yet: no flashbox kernel applies a score mod "
    "(the C API refuses one with FLASHBOX_ERR_UNSUPPORTED_IMPL on every backend). Softcapping and ALiBi "
    "are built in: flashbox.flash_attn_interface.flash_attn_func(..., softcap=, alibi_slopes= via "
    "flashbox's extension API). Masks (mask_mod in a BlockMask) are supported.")


def flex_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, score_mod=None, block_mask=None,
                   scale: Optional[float] = None, enable_gqa: bool = False, return_lse: bool = False,
                   kernel_options=None, *, return_aux=None):
    """torch.nn.attention.flex_attention.flex_attention's signature on flashbox.

    query [B, Hq, Tq, D], key [B, Hkv, Tk, D], value [B, Hkv, Tk, Dv]; Hkv != Hq needs enable_gqa=True
    (Hq a multiple of Hkv). block_mask: a FlexAttention BlockMask (or None: every key visible); its
    mask_mod runs as a built-in mask family where it is one (flashbox.flex_families; CPU too), else
    translated to CUDA C++ in the partial blocks (CUDA only). scale defaults to
    1/sqrt(D). Returns out [B, Hq, Tq, Dv] (contiguous, query's dtype), and with return_lse=True also
    lse [B, Hq, Tq] fp32 (natural log; -inf where a row sees no key, whose out is 0). return_aux (newer
    FlexAttention): an AuxRequest with lse=True returns (out, AuxOutput(lse=lse)).
    Differentiable in query, key, value. CUDA: float16 / bfloat16; CPU: float32 too (no mask_mod but a family's).
    """
    if score_mod is not None:
        raise NotImplementedError(f"flashbox.flex_attention: {_SCORE_MOD_ERROR}")
    del kernel_options   # FlexAttention's Triton tuning hints; flashbox chooses its own tiles
    want_lse = bool(return_lse)
    if return_aux is not None:
        if getattr(return_aux, "max_scores", False):
            raise NotImplementedError("flashbox.flex_attention: return_aux with max_scores=True is not supported "
                                      "(flashbox's kernels do not write the rows' maximum scores)")
        want_lse = want_lse or bool(getattr(return_aux, "lse", False))
    core.check_inputs(query, key, value, enable_gqa, devices=("cpu", "cuda", "meta"))
    B, Hq, Tq, _ = query.shape
    Tk = key.shape[2]
    if block_mask is None:
        tables, qbs, kvbs, mod_key = [None] * 8, 0, 0, 0
    else:
        tables, qbs, kvbs = core.block_mask_tables(block_mask, query.device, Tq, Tk, B, Hq)
        mod_key = _mask_mod_key(getattr(block_mask, "mask_mod", None), query.device)
        if mod_key and query.device.type == "cpu":
            core.check_mod_device(mod_key, query.device)
    o, lse = _fwd_op(query, key, value, *tables, qbs, kvbs, mod_key, _scale(scale))
    if return_aux is not None:
        from torch.nn.attention.flex_attention import AuxOutput
        return o, AuxOutput(lse=lse if getattr(return_aux, "lse", False) else None)
    return (o, lse) if want_lse else o
