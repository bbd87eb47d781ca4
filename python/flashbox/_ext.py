"""ctypes view of flashbox.h's "Extension 1" block: flashbox_attention_ext and the *_ext entry points
(sliding window, softcap, ALiBi, variable-length batches). Kept beside _lib.py, which it builds on; the
fields mirror the header one for one, in order, with the same C types.
"""

from __future__ import annotations

import ctypes

from . import _lib

__all__ = ["AttentionExt", "BlockMask", "CombineArgs", "default_ext", "forward_ext", "backward_ext", "combine",
           "AuxDType", "AuxDecl", "ModDesc", "AuxTensor", "ModInfo", "MOD_MASK", "MOD_SCORE", "MOD_MAX_AUX",
           "AUX_MAX_RANK", "MOD_SAME_BATCH", "MOD_SAME_HEADS", "mod_create", "mod_destroy", "mod_get_info"]


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
        ("mask_mod", ctypes.c_void_p),       # flashbox_mod (flashbox_mod_create) or None; cuda only
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


MOD_MASK, MOD_SCORE = 1, 2           # flashbox_mod_kind
MOD_MAX_AUX, AUX_MAX_RANK = 8, 4      # FLASHBOX_MOD_MAX_AUX, FLASHBOX_AUX_MAX_RANK
MOD_SAME_BATCH, MOD_SAME_HEADS = 1, 2  # flashbox_attention_ext.mask_mod_broadcast bits


class AuxDType:
    """flashbox_aux_dtype."""
    INT32, INT64, UINT8, FLOAT32, FLOAT16, BFLOAT16 = 0, 1, 2, 3, 4, 5


class AuxDecl(ctypes.Structure):
    """flashbox_aux_decl: an auxiliary tensor as the mod's source sees it (name, dtype, rank)."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
    ]


class ModDesc(ctypes.Structure):
    """flashbox_mod_desc."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("kind", ctypes.c_int),               # MOD_MASK or MOD_SCORE
        ("source", ctypes.c_char_p),
        ("function_name", ctypes.c_char_p),
        ("num_aux", ctypes.c_int32),
        ("aux", ctypes.POINTER(AuxDecl)),
        ("arch", ctypes.c_int32),             # 0: the current device's (sm_80 and sm_90a without one)
    ]


class AuxTensor(ctypes.Structure):
    """flashbox_aux_tensor: an auxiliary tensor bound to a call."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("sizes", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),      # elements
        ("device", ctypes.c_int),             # flashbox_device
    ]


class ModInfo(ctypes.Structure):
    """flashbox_mod_info."""

    _fields_ = [
        ("struct_size", ctypes.c_int32),
        ("from_cache", ctypes.c_int32),
        ("cached", ctypes.c_int32),
        ("num_archs", ctypes.c_int32),
        ("archs", ctypes.c_int32 * 4),
        ("cubin_bytes", ctypes.c_int64 * 4),
        ("seconds", ctypes.c_double),
        ("key", ctypes.c_char * 65),
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


def mod_create(kind: int, source: str, function_name: str, aux=(), arch: int = 0) -> int:
    """flashbox_mod_create: compiles a mod (CUDA C++) with NVRTC; `aux` is a sequence of (name, AuxDType,
    rank). Returns the flashbox_mod handle (an int; release it with mod_destroy); raises FlashboxError
    with the compiler's log on failure (UNSUPPORTED_IMPL where the library has no NVRTC)."""
    decls = (AuxDecl * max(1, len(aux)))()
    names = [n.encode() for n, _, _ in aux]   # kept alive for the call
    for i, (_, dtype, rank) in enumerate(aux):
        decls[i].name, decls[i].dtype, decls[i].rank = names[i], int(dtype), int(rank)
    d = ModDesc()
    d.struct_size = ctypes.sizeof(ModDesc)
    d.kind = int(kind)
    src, fname = source.encode(), function_name.encode()
    d.source, d.function_name = src, fname
    d.num_aux = len(aux)
    d.aux = ctypes.cast(decls, ctypes.POINTER(AuxDecl)) if aux else None
    d.arch = int(arch)
    out = ctypes.c_void_p()
    fn = _fn("flashbox_mod_create", [ctypes.POINTER(ModDesc), ctypes.POINTER(ctypes.c_void_p)])
    _lib.check(fn(ctypes.byref(d), ctypes.byref(out)))
    return int(out.value)


def mod_destroy(mod: int) -> None:
    """flashbox_mod_destroy (None or 0: nothing)."""
    lib = _lib.library()
    fn = getattr(lib.cdll, "flashbox_mod_destroy")
    fn.restype, fn.argtypes = None, [ctypes.c_void_p]
    fn(mod or None)


def mod_get_info(mod: int) -> ModInfo:
    """flashbox_mod_get_info: where the mod's CUBINs came from (compiled or the disk cache)."""
    info = ModInfo()
    info.struct_size = ctypes.sizeof(ModInfo)
    fn = _fn("flashbox_mod_get_info", [ctypes.c_void_p, ctypes.POINTER(ModInfo)])
    _lib.check(fn(mod, ctypes.byref(info)))
    return info
