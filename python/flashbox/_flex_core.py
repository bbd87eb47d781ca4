"""The eager half of flashbox.flex_attention: FlexAttention's BlockMask as flashbox_block_mask, the mask
mods' registry, and the C calls (forward and backward through flashbox_attention_*_ext).

Needs only torch >= 1.13 (no torch.library.custom_op), so the block-mask conversion and the CPU calls
are testable with older torch; flashbox.flex registers the custom ops over it.

Masks: a mask_mod that flashbox.flex_families recognises (causal, windows, documents, prefix-LM,
chunks) runs as flashbox's built-in family (the ext's fields, the BlockMask's tables dropped where
they add nothing); anything else as an NVRTC mask mod. route() decides per call and records it
(last_route()).

Layout: FlexAttention's [B, H, T, D] tensors are handed to the C API, which takes [B, T, H, D] with
strides, as their permuted strides (no copy); o and the gradients are allocated contiguous in
[B, H, T, D] and written through permuted strides too.
"""

from __future__ import annotations

import ctypes
import math
import threading
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

from . import _ext, _lib
from . import flex_families as ff
from . import flex_translate as ft
from ._device import on_device as _on_device

_DTYPES = {
    torch.float32: _lib.DType.FLOAT32,
    torch.float16: _lib.DType.FLOAT16,
    torch.bfloat16: _lib.DType.BFLOAT16,
}

# The BlockMask tables in flashbox_block_mask's order.
TABLES = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
          "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")


# ---- mask mods: translated, compiled, registered under an int key (what the custom op carries) ------

@dataclass
class ModEntry:
    handle: int
    aux: List[ft.AuxSpec]
    broadcast: int          # _ext.MOD_SAME_BATCH | _ext.MOD_SAME_HEADS: the mod reads neither b nor h
    name: str


@dataclass
class FamilyEntry:
    """A mask_mod recognised as a built-in mask family (flashbox.flex_families): run as the family
    where its Params resolve and verify at the call's shape, else as its mod (`mod_key`, translated
    and compiled the first time it is needed)."""
    fn: object
    resolver: ff.Resolver
    name: str
    device: object
    mod_key: int = 0


_registry = {}             # key -> ModEntry or FamilyEntry
_key_of = {}               # id(fn) -> (fn, key): the function is held, so its id stays its own
_registry_lock = threading.Lock()


def _register(entry) -> int:
    with _registry_lock:
        key = len(_registry) + 1
        _registry[key] = entry
        return key


def _mod_key(fn, device) -> int:
    """The registry key of fn translated to CUDA C++ and compiled (once per function: the caller
    remembers the key)."""
    tr = ft.translate_cached(fn, _ext.MOD_MASK, device=device)
    handle = ft.compile_translation(tr)
    broadcast = (0 if tr.uses_b else _ext.MOD_SAME_BATCH) | (0 if tr.uses_h else _ext.MOD_SAME_HEADS)
    return _register(ModEntry(handle, tr.aux, broadcast, getattr(fn, "__name__", "mask_mod")))


def mask_mod_key(fn, device=None) -> int:
    """0 for no mod (None, FlexAttention's noop_mask); else the registry key of fn: a FamilyEntry
    where flex_families recognises it, else its translated and compiled mod (once per function
    object, per process). device: the call's (the traced index tensors are put there, beside the
    tensors the mod captures)."""
    if ft.is_noop_mask(fn):
        return 0
    with _registry_lock:
        hit = _key_of.get(id(fn))
        if hit is not None and hit[0] is fn:
            return hit[1]
    family = ff.recognise(fn, device)
    name = getattr(fn, "__name__", "mask_mod")
    if family is not None:
        key = _register(FamilyEntry(fn, ff.Resolver(fn, family), name, device))
    else:
        key = _mod_key(fn, device)
    with _registry_lock:
        _key_of[id(fn)] = (fn, key)
    return key


def mod_entry(key: int):
    """The ModEntry (or FamilyEntry) a key names."""
    return _registry[key]


# ---- routes: which of flashbox's paths runs a call's mask -------------------------------------------

@dataclass(frozen=True)
class Route:
    """How a flex_attention call ran its mask: kind "none" (every key visible), "blocks" (the
    BlockMask's tables alone), "family" (a mask_mod recognised as a built-in family, `family` its
    name, `tables` whether the BlockMask's tables were passed too) or "mod" (the mask_mod as an NVRTC
    mod; `reason`: why a recognised family did not run, if one was recognised)."""
    kind: str
    family: str = ""
    tables: bool = False
    reason: str = ""

    def __str__(self) -> str:
        s = self.kind + (f":{self.family}" if self.family else "")
        s += " with the block tables" if self.tables else ""
        return s + (f" ({self.reason})" if self.reason else "")


_last_routes = {}


def last_route(which: str = "forward") -> Optional[Route]:
    """The route of this process's last flex forward ("forward") or backward ("backward") call."""
    return _last_routes.get(which)


def _fallback_mod(e: FamilyEntry, device: torch.device, reason: str) -> int:
    if device.type != "cuda":
        raise NotImplementedError(
            f"flashbox.flex_attention: the block_mask's mask_mod {e.name!r} is the built-in family "
            f"{e.resolver.family.name} but cannot run as it here ({reason}), and as a mask mod it runs only on "
            f"CUDA (flashbox compiles it to GPU code with NVRTC; its cpu backend cannot run device code)")
    with _registry_lock:
        key = e.mod_key
    if not key:
        key = _mod_key(e.fn, e.device)
        with _registry_lock:
            e.mod_key = e.mod_key or key
            key = e.mod_key
    return key


def route(mod_key: int, tables, qbs: int, kvbs: int, q: torch.Tensor, k: torch.Tensor, which: str):
    """(Route, the tables to pass, the mod key to pass, the family's Params or None) of a call: a
    FamilyEntry runs as its family where the family resolves and verifies at this shape (its tables
    dropped where they add nothing), else as its mod."""
    B, Hq, Tq, _ = q.shape
    Tk = k.shape[2]
    has_tables = tables is not None and tables[0] is not None
    params = None
    if not mod_key:
        r = Route("blocks" if has_tables else "none", tables=has_tables)
    elif isinstance(_registry[mod_key], FamilyEntry):
        e = _registry[mod_key]
        if ff.enabled():
            params, reason = e.resolver.params(B, Hq, Tq, Tk, q.device)
        else:
            reason = "families are turned off (flex_families.disabled)"
        if params is not None:
            keep = has_tables and not e.resolver.tables_add_nothing(params, tables, qbs, kvbs, B, Tq, Tk)
            r, mod_key = Route("family", params.family.name, keep), 0
            if not keep:
                tables = None
        else:
            mod_key = _fallback_mod(e, q.device, reason)
            r = Route("mod", tables=has_tables, reason=f"the family {e.resolver.family.name} was not used: {reason}")
    else:
        r = Route("mod", tables=has_tables)
    _last_routes[which] = r
    return r, tables, mod_key, params


# ---- BlockMask -> flashbox_block_mask ---------------------------------------------------------------

def block_mask_tables(block_mask, device, Tq: int, Tk: int, B: int, Hq: int) -> Tuple[list, int, int]:
    """FlexAttention's BlockMask (or any object with its attributes) as the eight int32 contiguous
    tables on `device` (None where absent), q_block_size and kv_block_size. Checks what the C API
    cannot see: the mask's sequence lengths and its batch / heads against the call's."""
    bs = getattr(block_mask, "BLOCK_SIZE", None)
    if bs is None:
        raise TypeError(f"flashbox.flex_attention: block_mask must be a torch.nn.attention.flex_attention."
                        f"BlockMask (it has no BLOCK_SIZE), got {type(block_mask).__name__}")
    if isinstance(bs, int):
        qbs = kvbs = int(bs)
    else:
        qbs, kvbs = int(bs[0]), int(bs[1])
    seq = getattr(block_mask, "seq_lengths", None)
    if seq is not None and (int(seq[0]), int(seq[1])) != (Tq, Tk):
        raise ValueError(f"flashbox.flex_attention: the block_mask was made for sequence lengths "
                         f"{tuple(int(s) for s in seq)} but the call has q_len={Tq}, kv_len={Tk}; make it for "
                         f"these lengths (create_block_mask(..., Q_LEN={Tq}, KV_LEN={Tk}))")
    tables = []
    for name in TABLES:
        t = getattr(block_mask, name, None)
        if t is not None:
            if t.dim() not in (3, 4):
                raise ValueError(f"flashbox.flex_attention: block_mask.{name} must be 3-D or 4-D, got shape "
                                 f"{tuple(t.shape)}")
            t = t.to(device=device, dtype=torch.int32).contiguous()
        tables.append(t)
    kv_num, kv_idx, fkv_num, fkv_idx, q_num, q_idx, fq_num, fq_idx = tables
    if kv_num is None or kv_idx is None:
        raise ValueError("flashbox.flex_attention: block_mask has no kv_num_blocks / kv_indices")
    if (fkv_num is None) != (fkv_idx is None):
        raise ValueError("flashbox.flex_attention: block_mask has one of full_kv_num_blocks / full_kv_indices "
                         "without the other")
    # The transposes go together: q_* both or neither, and full_q_* with full_kv_* (the C API's rule);
    # a mask that lacks part of them is passed without any (the forward never reads them, the CPU
    # backward derives them, the CUDA backward does not read them).
    if q_num is None or q_idx is None or ((fkv_num is not None) != (fq_num is not None and fq_idx is not None)):
        tables[4:] = [None, None, None, None]
    elif fkv_num is None:
        tables[6:] = [None, None]
    bm_b, bm_h, nqb = kv_num.shape
    if bm_b not in (1, B) or bm_h not in (1, Hq):
        raise ValueError(f"flashbox.flex_attention: the block_mask's batch and heads ({bm_b}, {bm_h}) must "
                         f"each be 1 (broadcast) or the call's ({B}, {Hq})")
    if nqb != -(-Tq // qbs):
        raise ValueError(f"flashbox.flex_attention: the block_mask has {nqb} query blocks of {qbs} rows, "
                         f"but q_len={Tq} needs {-(-Tq // qbs)}")
    return tables, qbs, kvbs


def _fill_block_mask(tables: Sequence[Optional[torch.Tensor]], qbs: int, kvbs: int) -> _ext.BlockMask:
    kv_num, kv_idx = tables[0], tables[1]
    bm = _ext.BlockMask()
    bm.struct_size = ctypes.sizeof(_ext.BlockMask)
    bm.batch, bm.heads = kv_num.shape[0], kv_num.shape[1]
    bm.q_block_size, bm.kv_block_size = qbs, kvbs
    bm.max_kv_blocks = kv_idx.shape[-1]
    bm.max_q_blocks = tables[5].shape[-1] if tables[5] is not None else 0
    for name, t in zip(TABLES, tables):
        setattr(bm, name, t.data_ptr() if t is not None else None)
    return bm


# ---- the C calls -------------------------------------------------------------------------------

def _strides_bthd(t: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int, int]]:
    """A [B, H, T, D] tensor as the C API's [B, T, H, D] view: (tensor, (batch, seq, head) strides).
    head_dim must be contiguous and no dimension broadcast (else one contiguous copy); a dimension of
    size 1 gets the tensor's whole extent as its stride (torch leaves it arbitrary)."""
    size, stride = t.shape, t.stride()
    if stride[3] != 1 or any(stride[i] <= 0 and size[i] > 1 for i in range(3)):
        t = t.contiguous()
        size, stride = t.shape, t.stride()
    extent = 1 + sum((size[i] - 1) * stride[i] for i in range(4))
    s = tuple(stride[i] if size[i] > 1 else extent for i in range(4))
    return t, (s[0], s[2], s[1])


def _stream(t: torch.Tensor):
    return torch.cuda.current_stream(t.device).cuda_stream if t.device.type == "cuda" else None


def check_inputs(q, k, v, enable_gqa: bool, devices=("cpu", "cuda")) -> None:
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.dim() != 4:
            raise ValueError(f"flashbox.flex_attention: {name} must be 4-D [batch, heads, seq, head_dim], got "
                             f"shape {tuple(t.shape)}")
    B, Hq, Tq, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"flashbox.flex_attention: query, key, value must have one batch size, got "
                         f"{q.shape[0]}, {k.shape[0]}, {v.shape[0]}")
    if k.shape[3] != D:
        raise ValueError(f"flashbox.flex_attention: query and key must have one head_dim, got {D} and "
                         f"{k.shape[3]}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"flashbox.flex_attention: key {tuple(k.shape)} and value {tuple(v.shape)} must agree "
                         f"in batch, heads and sequence length")
    Hkv = k.shape[1]
    if Hkv != Hq:
        if not enable_gqa:
            raise ValueError(f"flashbox.flex_attention: query has {Hq} heads and key/value {Hkv}; pass "
                             f"enable_gqa=True for grouped-query attention")
        if Hq % Hkv != 0:
            raise ValueError(f"flashbox.flex_attention: enable_gqa needs query heads ({Hq}) to be a multiple of "
                             f"key/value heads ({Hkv})")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"flashbox.flex_attention: query, key, value must have one dtype, got {q.dtype}, "
                        f"{k.dtype}, {v.dtype}")
    if q.dtype not in _DTYPES:
        raise TypeError(f"flashbox.flex_attention: dtype {q.dtype} is not supported (float16 or bfloat16 on "
                        f"CUDA; float32 too on CPU)")
    if not (q.device == k.device == v.device):
        raise ValueError(f"flashbox.flex_attention: query, key, value must be on one device, got {q.device}, "
                         f"{k.device}, {v.device}")
    if q.device.type not in devices:
        raise ValueError(f"flashbox.flex_attention: device {q.device} is not supported (cpu or cuda)")


def check_mod_device(mod_key: int, device: torch.device) -> None:
    """A mask mod runs on CUDA only (the C API's cpu backend refuses it: it cannot run device code);
    its captured tensors must be on the call's device."""
    if not mod_key or isinstance(_registry[mod_key], FamilyEntry):   # a family: route() decides per call
        return
    e = _registry[mod_key]
    if device.type != "cuda":
        raise NotImplementedError(
            f"flashbox.flex_attention: the block_mask's mask_mod {e.name!r} runs only on CUDA (the sm80 kernel "
            f"family, and on an H100 the sm90 mask kernels): flashbox compiles it to GPU code with NVRTC, and "
            f"its cpu backend cannot run device code. On CPU, pass a BlockMask without a mask_mod (its full "
            f"blocks admit every element, its partial blocks too), or run on a CUDA device")
    for a in e.aux:
        if a.tensor.device != device:
            raise ValueError(f"flashbox.flex_attention: the mask_mod {e.name!r} captures the tensor {a.name!r} on "
                             f"{a.tensor.device}, but the call runs on {device}; create it on {device}")


def _build_ext(tables, qbs, kvbs, mod_key, head_dim_v, head_dim, keep: list,
               params: Optional[ff.Params] = None) -> _ext.AttentionExt:
    ext = _ext.default_ext()
    if head_dim_v != head_dim:
        ext.head_dim_v = head_dim_v
    if params is not None:   # causal (window_right 0) goes as args.causal: the plain call where it is all
        ext.window_left = params.window_left
        ext.window_right = -1 if params.causal else params.window_right
        ext.attention_chunk = params.chunk
        if params.doc_q is not None:
            ext.document_ids_q, ext.document_ids_k = params.doc_q.data_ptr(), params.doc_k.data_ptr()
            keep += [params.doc_q, params.doc_k]
        if params.prefix is not None:
            ext.prefix_lengths = params.prefix.data_ptr()
            keep.append(params.prefix)
    if tables is not None and tables[0] is not None:
        bm = _fill_block_mask(tables, qbs, kvbs)
        keep.append(bm)
        ext.block_mask = ctypes.addressof(bm)
    if mod_key:
        e = _registry[mod_key]
        ext.mask_mod = e.handle
        ext.mask_mod_broadcast = e.broadcast
        if e.aux:
            arr = (_ext.AuxTensor * len(e.aux))()
            for i, a in enumerate(e.aux):
                t = a.tensor
                arr[i].data = t.data_ptr() if t.numel() else None
                arr[i].dtype = a.dtype
                arr[i].rank = a.rank
                for d in range(a.rank):
                    arr[i].sizes[d] = t.shape[d]
                    arr[i].strides[d] = t.stride(d) if t.shape[d] > 1 else 0
                arr[i].device = _lib.Device.CUDA if t.device.type == "cuda" else _lib.Device.CPU
            keep.append(arr)
            ext.mask_mod_aux = ctypes.addressof(arr)
    return ext


def _fill_args(a: _lib.AttentionArgs, q, k, v, o, lse, scale: float) -> list:
    keep = []
    (q_, qs), (k_, ks), (v_, vs), (o_, os_) = (_strides_bthd(t) for t in (q, k, v, o))
    keep += [q_, k_, v_]
    if o_ is not o:
        raise RuntimeError("flashbox.flex_attention: internal: o must be written in place")
    B, Hq, Tq, D = q.shape
    a.device = _lib.Device.CUDA if q.device.type == "cuda" else _lib.Device.CPU
    a.dtype = _DTYPES[q.dtype]
    a.impl = _lib.Impl.AUTO
    a.batch, a.seqlen_q, a.heads_q, a.head_dim = B, Tq, Hq, D
    a.seqlen_k, a.heads_kv = k.shape[2], k.shape[1]
    a.q, a.k, a.v, a.o, a.lse = q_.data_ptr(), k_.data_ptr(), v_.data_ptr(), o.data_ptr(), lse.data_ptr()
    a.q_stride[:], a.k_stride[:], a.v_stride[:], a.o_stride[:] = qs, ks, vs, os_
    a.softmax_scale = scale
    a.causal = 0
    a.stream = _stream(q)
    return keep


def forward(q, k, v, tables, qbs: int, kvbs: int, mod_key: int, scale: float):
    """o [B, Hq, Tq, Dv] (contiguous) and lse [B, Hq, Tq] (fp32, natural log; -inf where a row sees no
    key)."""
    check_inputs(q, k, v, enable_gqa=True)
    _, tables, mod_key, params = route(mod_key, tables, qbs, kvbs, q, k, "forward")
    check_mod_device(mod_key, q.device)
    B, Hq, Tq, D = q.shape
    Dv = v.shape[3]
    o = torch.empty((B, Hq, Tq, Dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hq, Tq), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        lse.fill_(-math.inf)
        return o, lse
    a = _lib.AttentionArgs()
    keep = _fill_args(a, q, k, v, o, lse, scale)
    a.causal = int(params is not None and params.causal)
    ext = _build_ext(tables, qbs, kvbs, mod_key, Dv, D, keep, params)
    with _on_device(q):
        _ext.forward_ext(a, ext)
    return o, lse


def backward(dout, q, k, v, o, lse, tables, qbs: int, kvbs: int, mod_key: int, scale: float):
    """dq, dk, dv (contiguous [B, H, T, D], like q, k, v) through flashbox_attention_backward_ext with the
    forward's block mask and mask mod."""
    check_inputs(q, k, v, enable_gqa=True)
    _, tables, mod_key, params = route(mod_key, tables, qbs, kvbs, q, k, "backward")
    check_mod_device(mod_key, q.device)
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    g = _lib.AttentionGradArgs()
    o_, _ = _strides_bthd(o)
    lse_ = lse.contiguous()
    keep = _fill_args(g.fwd, q, k, v, o_, lse_, scale)
    do_, dos = _strides_bthd(dout)
    keep += [o_, lse_, do_]
    g.dout = do_.data_ptr()
    g.dout_stride[:] = dos
    g.dq, g.dk, g.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    g.dq_stride[:] = _strides_bthd(dq)[1]
    g.dk_stride[:] = _strides_bthd(dk)[1]
    g.dv_stride[:] = _strides_bthd(dv)[1]
    g.deterministic = 0
    g.fwd.causal = int(params is not None and params.causal)
    ext = _build_ext(tables, qbs, kvbs, mod_key, v.shape[3], q.shape[3], keep, params)
    with _on_device(q):
        _ext.backward_ext(g, ext)
    return dq, dk, dv
