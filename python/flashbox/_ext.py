"""ctypes view of flashbox.h's "Extension 1" block: flashbox_attention_ext and the *_ext entry points
(sliding window, softcap, ALiBi, variable-length batches). Kept beside _lib.py, which it builds on; the
fields mirror the header one for one, in order, with the same C types.
"""

from __future__ import annotations

import ctypes

from . import _lib

__all__ = ["AttentionExt", "BlockMask", "CombineArgs", "default_ext", "forward_ext", "backward_ext", "combine"]


class AttentionExt(ctypes.Structure):
    """flashbox_attention_ext."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("window_left", ctypes.c_int32),     # -1: unbounded
        ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),         # 0: off
        ("alibi_slopes", ctypes.c_void_p),   # const float *, [heads_q] or [batch, heads_q]
        ("alibi_batch_stride", ctypes.c_int64),
        ("cu_seqlens_q", ctypes.c_void_p),   # const int32_t *, [batch + 1]
        ("cu_seqlens_k", ctypes.c_void_p),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("head_dim_v", ctypes.c_int64),      # V's and O's head dim; 0: head_dim
        ("attention_chunk", ctypes.c_int64), # chunked local attention; 0: off
        ("seqused_q", ctypes.c_void_p),      # int32 [batch] or None
        ("seqused_k", ctypes.c_void_p),
        ("qv", ctypes.c_void_p),             # [.., heads_q, head_dim_v] or None (forward only)
        ("qv_stride", ctypes.c_int64 * 3),
        ("learnable_sink", ctypes.c_void_p), # const float *, [heads_q] or None
        ("dsink", ctypes.c_void_p),          # float *, [heads_q]: the backward's sink gradient
        ("num_splits", ctypes.c_int64),      # forward: key parts combined (0/1: one part)
        ("out_partial", ctypes.c_void_p),    # fp32 [splits, batch, seqlen_q, heads_q, head_dim_v] or None
        ("lse_partial", ctypes.c_void_p),    # fp32 [splits, batch, heads_q, seqlen_q] or None
        ("document_ids_q", ctypes.c_void_p), # int32 [batch, seqlen_q] (varlen: [total_q]) or None
        ("document_ids_k", ctypes.c_void_p), # int32 [batch, seqlen_k] (varlen: [total_k]) or None
        ("prefix_lengths", ctypes.c_void_p), # int32 [batch] (prefix-LM) or None
        ("block_mask", ctypes.c_void_p),     # BlockMask * or None
        ("out_dtype", ctypes.c_int),         # flashbox_dtype of o for fp8 e4m3 inputs (bf16/fp16); else 0
        ("q_descale", ctypes.c_void_p),      # const float *, fp32 [batch, heads_kv] or None (1.0)
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
        ("q_descale_stride", ctypes.c_int64 * 2),  # batch, kv head (elements; 0 broadcasts)
        ("k_descale_stride", ctypes.c_int64 * 2),
        ("v_descale_stride", ctypes.c_int64 * 2),
        ("mask_mod", ctypes.c_void_p),       # flashbox_mod (flashbox_mod_create) or None; cuda: the sm80 family
        ("mask_mod_aux", ctypes.c_void_p),   # const flashbox_aux_tensor * (the mod's declared aux tensors) or None
        ("score_mod", ctypes.c_void_p),      # refused by every backend today
        ("score_mod_aux", ctypes.c_void_p),
        ("mask_mod_broadcast", ctypes.c_int32),  # FLASHBOX_MOD_SAME_BATCH (1) | FLASHBOX_MOD_SAME_HEADS (2), or 0
    ]


class BlockMask(ctypes.Structure):
    """flashbox_block_mask (FlexAttention's BlockMask layout; dense row-major int32 tables)."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("batch", ctypes.c_int64),              # 1 (broadcast) or the call's batch
        ("heads", ctypes.c_int64),              # 1 (broadcast) or heads_q
        ("q_block_size", ctypes.c_int64),
        ("kv_block_size", ctypes.c_int64),
        ("max_kv_blocks", ctypes.c_int64),      # last dim of kv_indices / full_kv_indices
        ("max_q_blocks", ctypes.c_int64),       # last dim of q_indices / full_q_indices
        ("kv_num_blocks", ctypes.c_void_p),     # [batch, heads, num_q_blocks]
        ("kv_indices", ctypes.c_void_p),        # [batch, heads, num_q_blocks, max_kv_blocks]
        ("full_kv_num_blocks", ctypes.c_void_p),
        ("full_kv_indices", ctypes.c_void_p),
        ("q_num_blocks", ctypes.c_void_p),      # [batch, heads, num_kv_blocks] (optional transposes)
        ("q_indices", ctypes.c_void_p),         # [batch, heads, num_kv_blocks, max_q_blocks]
        ("full_q_num_blocks", ctypes.c_void_p),
        ("full_q_indices", ctypes.c_void_p),
    ]


class CombineArgs(ctypes.Structure):
    """flashbox_combine_args (flashbox_attention_combine: split partial results into one attention)."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("device", ctypes.c_int),
        ("out_dtype", ctypes.c_int),
        ("num_splits", ctypes.c_int64),
        ("batch", ctypes.c_int64),
        ("seqlen", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("head_dim_v", ctypes.c_int64),
        ("out_partial", ctypes.c_void_p),       # fp32 [splits, batch, seqlen, heads, head_dim_v]
        ("out_partial_stride", ctypes.c_int64 * 4),
        ("lse_partial", ctypes.c_void_p),       # fp32 [splits, batch, seqlen, heads]
        ("lse_partial_stride", ctypes.c_int64 * 4),
        ("out", ctypes.c_void_p),               # out_dtype [batch, seqlen, heads, head_dim_v]
        ("out_stride", ctypes.c_int64 * 3),
        ("lse", ctypes.c_void_p),               # fp32 [batch, heads, seqlen] or None
        ("stream", ctypes.c_void_p),
    ]


def default_ext() -> AttentionExt:
    e = AttentionExt()
    e.struct_size = ctypes.sizeof(AttentionExt)
    e.window_left = e.window_right = -1
    return e


def _fn(name, argtypes):
    lib = _lib.library()
    try:
        fn = getattr(lib.cdll, name)
    except AttributeError:
        raise AttributeError(f"{lib.path} does not export {name} (a build older than flashbox.h's "
                             f"Extension 1?)") from None
    fn.restype = ctypes.c_int
    fn.argtypes = argtypes
    return fn


def forward_ext(args: _lib.AttentionArgs, ext: AttentionExt) -> None:
    """flashbox_attention_forward_ext(&args, &ext); raises FlashboxError on failure."""
    fn = _fn("flashbox_attention_forward_ext", [ctypes.POINTER(_lib.AttentionArgs), ctypes.POINTER(AttentionExt)])
    _lib.check(fn(ctypes.byref(args), ctypes.byref(ext)))


def backward_ext(args: _lib.AttentionGradArgs, ext: AttentionExt) -> None:
    """flashbox_attention_backward_ext(&args, &ext); raises FlashboxError on failure."""
    fn = _fn("flashbox_attention_backward_ext",
             [ctypes.POINTER(_lib.AttentionGradArgs), ctypes.POINTER(AttentionExt)])
    _lib.check(fn(ctypes.byref(args), ctypes.byref(ext)))


def combine(args: CombineArgs) -> None:
    """flashbox_attention_combine(&args) (struct_size set here); raises FlashboxError on failure."""
    args.struct_size = ctypes.sizeof(CombineArgs)
    fn = _fn("flashbox_attention_combine", [ctypes.POINTER(CombineArgs)])
    _lib.check(fn(ctypes.byref(args)))
