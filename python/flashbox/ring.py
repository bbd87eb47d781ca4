"""Context-parallel attention from PyTorch: one sequence sharded over the ranks of a process group.

    import torch.distributed as dist
    from flashbox.ring import ring_attention, shard_sequence
    dist.init_process_group("nccl")                        # torchrun, one process per GPU
    q_local = shard_sequence(q, dist.get_world_size(), dist.get_rank())   # [B, S, H, D], S = T / world
    o_local = ring_attention(q_local, k_local, v_local, causal=True)       # this rank's queries' output
    o_local.backward(do_local)                                             # dq/dk/dv of the shard

Each rank passes its shard of q, k, v ([batch, S, heads, head_dim], bf16/fp16 on its GPU) in the
layout's token order (`shard_sequence` cuts a global tensor that way, `unshard_sequence` puts shards
back) and gets its queries' output over the whole sequence of world * S tokens; autograd runs the
context-parallel backward with the forward's O and LSE. The work is libflashbox_cp's (the C API
include/flashbox/context_parallel.h): the ring (or all-gather) over NCCL, the next K/V shard in
flight while the current one is computed, partial results merged exactly by their LSEs.

The NCCL communicator: ProcessGroupNCCL does not hand out its ncclComm_t, so this module makes one
per (process group, GPU) the first time it is used: rank 0 of the group creates an ncclUniqueId, the
group broadcasts it, and every rank calls ncclCommInitRank on its current GPU. The transfers are
NCCL's all the same; NVLink multicast stays off (NCCL_NVLS_ENABLE=0 is set unless already set).

libflashbox_cp.so is looked for at $FLASHBOX_CP_LIBRARY, then beside the libflashbox.so that
flashbox._lib loads.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Optional

import torch
import torch.distributed as dist

from . import _lib
from .ops import _DTYPES, _as_bthd, _fill_fwd, _on_device

__all__ = ["ring_attention", "simulated_ranks", "shard_sequence", "unshard_sequence", "global_tokens", "LAYOUTS", "VARIANTS",
           "cp_library"]

LAYOUTS = {"contiguous": 0, "zigzag": 1}
VARIANTS = {"ring": 0, "all_gather": 1}
_ID_BYTES = 128

_lock = threading.Lock()
_cp = None
_comms: dict = {}


def cp_library() -> ctypes.CDLL:
    """libflashbox_cp, loaded on first use (after libflashbox, which it links against)."""
    global _cp
    if _cp is not None:
        return _cp
    with _lock:
        if _cp is None:
            base = _lib.library_path()  # loads libflashbox.so first, so the cp library's dependency is met
            path = os.environ.get("FLASHBOX_CP_LIBRARY") or os.path.join(os.path.dirname(base), "libflashbox_cp.so")
            if not os.path.isfile(path):
                raise _lib.LibraryNotFoundError(f"libflashbox_cp.so not found at {path}: build the target flashbox_cp "
                                                f"or set FLASHBOX_CP_LIBRARY")
            lib = ctypes.CDLL(path)
            vp, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
            for name, res, args in (
                ("flashbox_cp_forward", i32, [ctypes.POINTER(_lib.AttentionArgs), i32, i32, vp]),
                ("flashbox_cp_backward", i32, [ctypes.POINTER(_lib.AttentionGradArgs), i32, i32, vp]),
                ("flashbox_cp_forward_simulated", i32, [ctypes.POINTER(_lib.AttentionArgs), i32, i32, i32]),
                ("flashbox_cp_backward_simulated", i32, [ctypes.POINTER(_lib.AttentionGradArgs), i32, i32, i32]),
                ("flashbox_cp_global_token", i64, [i32, i32, i32, i64, i64]),
                ("flashbox_cp_nccl_unique_id", i32, [ctypes.c_char_p]),
                ("flashbox_cp_nccl_comm_init", i32, [ctypes.POINTER(vp), i32, i32, ctypes.c_char_p]),
                ("flashbox_cp_nccl_comm_destroy", i32, [vp]),
                ("flashbox_cp_have_nccl", i32, []),
                ("flashbox_cp_last_error", ctypes.c_char_p, []),
            ):
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = res, args
            _cp = lib
    return _cp


def _check(rc: int) -> None:
    if rc != 0:
        msg = cp_library().flashbox_cp_last_error()
        raise _lib.FlashboxError(rc, msg.decode("utf-8", "replace") if msg else "")


def global_tokens(world: int, rank: int, tokens_per_rank: int, layout: str = "zigzag") -> torch.Tensor:
    """Global positions of the shard's tokens, in local order (int64)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    if layout == "zigzag":
        if tokens_per_rank % 2:
            raise ValueError(f"zigzag needs an even number of tokens per rank, got {tokens_per_rank}")
        c = tokens_per_rank // 2
        return torch.cat([torch.arange(rank * c, (rank + 1) * c),
                          torch.arange((2 * world - 1 - rank) * c, (2 * world - rank) * c)])
    return torch.arange(rank * tokens_per_rank, (rank + 1) * tokens_per_rank)


def shard_sequence(x: torch.Tensor, world: int, rank: int, layout: str = "zigzag", dim: int = 1) -> torch.Tensor:
    """Rank `rank`'s shard of a global tensor along `dim` (the sequence), contiguous."""
    if x.shape[dim] % world:
        raise ValueError(f"sequence length {x.shape[dim]} is not a multiple of world {world}")
    idx = global_tokens(world, rank, x.shape[dim] // world, layout).to(x.device)
    return x.index_select(dim, idx).contiguous()


def unshard_sequence(shards, layout: str = "zigzag", dim: int = 1) -> torch.Tensor:
    """The global tensor from the list of every rank's shard (inverse of shard_sequence)."""
    world = len(shards)
    s = shards[0].shape[dim]
    shape = list(shards[0].shape)
    shape[dim] = world * s
    out = shards[0].new_empty(shape)
    for r, t in enumerate(shards):
        out.index_copy_(dim, global_tokens(world, r, s, layout).to(t.device), t)
    return out


def _comm(group, device: torch.device) -> int:
    """The NCCL communicator of `group` on `device` (made once, collectively, on first use)."""
    key = (group if group is not None else dist.group.WORLD, device.index)
    comm = _comms.get(key)
    if comm is not None:
        return comm
    lib = cp_library()
    if not lib.flashbox_cp_have_nccl():
        raise _lib.FlashboxError(_lib.ErrorCode.UNSUPPORTED_IMPL, "libflashbox_cp was built without NCCL")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    uid = ctypes.create_string_buffer(_ID_BYTES)
    if rank == 0:
        _check(lib.flashbox_cp_nccl_unique_id(uid))
    backend = dist.get_backend(group)
    t = torch.frombuffer(bytearray(uid.raw), dtype=torch.uint8).clone()
    t = t.to(device) if backend == "nccl" else t
    dist.broadcast(t, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    uid = ctypes.create_string_buffer(bytes(t.cpu().tolist()), _ID_BYTES)
    handle = ctypes.c_void_p()
    with torch.cuda.device(device):
        _check(lib.flashbox_cp_nccl_comm_init(ctypes.byref(handle), world, rank, uid))
    _comms[key] = handle.value
    return handle.value


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, softmax_scale, causal, layout, variant, comm):
        q, qs = _as_bthd(q, "q")
        k, ks = _as_bthd(k, "k")
        v, vs = _as_bthd(v, "v")
        o = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
        a = _lib.AttentionArgs()
        _fill_fwd(a, q, k, v, o, lse, qs, ks, vs, o.stride()[:3], softmax_scale, causal)
        with _on_device(q):
            _check(cp_library().flashbox_cp_forward(ctypes.byref(a), layout, variant, comm))
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mark_non_differentiable(lse)
        ctx.args = (softmax_scale, causal, layout, variant, comm)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        softmax_scale, causal, layout, variant, comm = ctx.args
        do, dos = _as_bthd(do, "dout", warn=False)
        dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
        g = _lib.AttentionGradArgs()
        _fill_fwd(g.fwd, q, k, v, o, lse, _as_bthd(q, "q")[1], _as_bthd(k, "k")[1], _as_bthd(v, "v")[1],
                  o.stride()[:3], softmax_scale, causal)
        g.dout = do.data_ptr()
        g.dout_stride[:] = dos
        g.dq, g.dk, g.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        g.dq_stride[:] = dq.stride()[:3]
        g.dk_stride[:] = dk.stride()[:3]
        g.dv_stride[:] = dv.stride()[:3]
        g.deterministic = 0
        with _on_device(q):
            _check(cp_library().flashbox_cp_backward(ctypes.byref(g), layout, variant, comm))
        return dq, dk, dv, None, None, None, None, None


def simulated_ranks(qs, ks, vs, causal=True, softmax_scale=None, layout="zigzag", variant="ring", douts=None):
    """All ranks in this process on one device (the loopback transport): qs/ks/vs are lists of every
    rank's shard on one GPU (or the CPU). Returns the ranks' outputs, or with douts their (dq, dk, dv)
    after a forward. The same rank programs as ring_attention, without NCCL: for tests and for
    measuring the algorithm's own cost on one GPU (bench/ring_bench.py --simulate)."""
    world = len(qs)
    lay, var = LAYOUTS[layout], VARIANTS[variant]
    fwd = (_lib.AttentionArgs * world)()
    os_, lses, keep = [], [], []
    for r in range(world):
        q, qst = _as_bthd(qs[r], "q")
        k, kst = _as_bthd(ks[r], "k")
        v, vst = _as_bthd(vs[r], "v")
        o = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
        _fill_fwd(fwd[r], q, k, v, o, lse, qst, kst, vst, o.stride()[:3], float(softmax_scale or 0.0), causal)
        os_.append(o), lses.append(lse), keep.append((q, k, v))
    _check(cp_library().flashbox_cp_forward_simulated(fwd, world, lay, var))
    if douts is None:
        return os_
    grads = (_lib.AttentionGradArgs * world)()
    out = []
    for r in range(world):
        do, dos = _as_bthd(douts[r], "dout", warn=False)
        q, k, v = keep[r]
        dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
        g = grads[r]
        g.fwd = fwd[r]
        g.dout = do.data_ptr()
        g.dout_stride[:] = dos
        g.dq, g.dk, g.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        g.dq_stride[:] = dq.stride()[:3]
        g.dk_stride[:] = dk.stride()[:3]
        g.dv_stride[:] = dv.stride()[:3]
        out.append((dq, dk, dv))
        keep.append(do)
    _check(cp_library().flashbox_cp_backward_simulated(grads, world, lay, var))
    return out


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                   softmax_scale: Optional[float] = None, group=None, layout: str = "zigzag",
                   variant: str = "ring", return_lse: bool = False):
    """This rank's attention output over the whole sharded sequence (see the module docstring).

    q: [B, S, Hq, D], k, v: [B, S, Hkv, D], this rank's shard in `layout` order ("zigzag": chunks
    rank and 2*world-1-rank of 2*world; "contiguous": tokens [rank*S, (rank+1)*S)). `variant`:
    "ring" (send/recv, overlapped) or "all_gather" (one all-gather; for short shards).
    Returns o (and lse [B, Hq, S] fp32 when return_lse)."""
    if q.device.type != "cuda":
        raise ValueError("ring_attention runs on CUDA tensors (one GPU per rank)")
    if q.dtype not in _DTYPES or not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype of {list(_DTYPES)}, got {q.dtype}, {k.dtype}, {v.dtype}")
    if layout not in LAYOUTS or variant not in VARIANTS:
        raise ValueError(f"layout must be one of {list(LAYOUTS)} and variant one of {list(VARIANTS)}")
    comm = _comm(group, q.device)
    o, lse = _RingAttention.apply(q, k, v, float(softmax_scale or 0.0), bool(causal), LAYOUTS[layout],
                                  VARIANTS[variant], comm)
    return (o, lse) if return_lse else o
