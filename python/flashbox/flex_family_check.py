"""A recognised mask family (flashbox.flex_families.Family) at one call's shape: flashbox_attention_ext's
fields (resolve), the family's rule (rule: core::visible of src/core/masks.hpp in Python), the check
of that rule against the mask_mod itself on random and boundary points (verify), whether a
BlockMask's tables add anything to it (tables_add_nothing), and the per-mask_mod cache of all of it
(Resolver). flashbox.flex_families' module docstring says what is recognised and why it is exact.

Needs torch >= 1.13.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple

import torch

if TYPE_CHECKING:
    from .flex_families import Family

__all__ = ["Params", "Resolver", "resolve", "rule", "verify", "block_visibility", "tables_add_nothing"]

_INT32_MAX = 2 ** 31 - 1


# ---- a family at a call's shape: flashbox's fields ------------------------------------------------

@dataclass(eq=False)
class Params:
    """A family as flashbox_attention_ext's fields for one call shape: window_left / window_right
    (-1 unbounded; window_right 0 is causal, passed as the causal flag), attention_chunk (0 off), and
    int32 tensors on the call's device: document ids [B, Tq] / [B, Tk] and prefix lengths [B] (None
    where the family has none)."""
    family: Family
    window_left: int = -1
    window_right: int = -1
    chunk: int = 0
    doc_q: Optional[torch.Tensor] = None
    doc_k: Optional[torch.Tensor] = None
    prefix: Optional[torch.Tensor] = None
    tables_checked: dict = field(default_factory=dict)   # Resolver's cache: tables -> tables_add_nothing

    @property
    def causal(self) -> bool:
        return self.window_right == 0


def _fits_int32(t: torch.Tensor) -> bool:
    if t.dtype != torch.int64 or t.numel() == 0:
        return True
    return bool((t.min() >= -_INT32_MAX - 1).item()) and bool((t.max() <= _INT32_MAX).item())


def _doc_ids(r, B: int, T: int, device) -> torch.Tensor:
    """The ids a document read (flex_families._Read: a tensor and what indexes each dimension) gives
    for B batch entries and T positions: int32 [B, T], contiguous, on `device`."""
    t = r.tensor
    if t.device != torch.device(device):
        raise ValueError(f"the document ids are on {t.device}, the call on {device}")
    if t.dim() == 1:
        if t.shape[0] < T:
            raise ValueError(f"document ids of length {t.shape[0]} for a sequence of {T}")
        x = t[:T].unsqueeze(0).expand(B, T)
    else:
        x = t if r.idx[0] == "b" else t.t()
        if x.shape[0] < B or x.shape[1] < T:
            raise ValueError(f"document ids of shape {tuple(x.shape)} (batch, position) for batch {B} and length {T}")
        x = x[:B, :T]
    if not _fits_int32(x):
        raise ValueError("document ids outside int32")
    return x.to(torch.int32).contiguous()


def resolve(f: Family, B: int, Tq: int, Tk: int, device) -> Params:
    """The family's fields for a call of batch B, Tq queries and Tk keys on `device` (FlexAttention's
    absolute positions to flashbox's bottom-right ones). Raises ValueError where they cannot say it."""
    shift = Tk - Tq
    p = Params(f, chunk=f.chunk)
    if f.lo is not None:
        p.window_left = -f.lo + shift
        if p.window_left < 0:
            raise ValueError(f"the window's lower bound kv_idx - q_idx >= {f.lo} needs window_left "
                             f"{p.window_left} at Tk - Tq = {shift}")
    if f.hi is not None:
        p.window_right = f.hi - shift
        if p.window_right < 0:
            raise ValueError(f"the upper bound kv_idx - q_idx <= {f.hi} needs window_right {p.window_right} "
                             f"at Tk - Tq = {shift}")
    if f.chunk and shift != 0:
        raise ValueError(f"a chunk needs Tq = Tk (FlexAttention's chunks start at q_idx 0, flashbox's at key 0), "
                         f"got {Tq} and {Tk}")
    if f.doc_q is not None:
        p.doc_q, p.doc_k = _doc_ids(f.doc_q, B, Tq, device), _doc_ids(f.doc_k, B, Tk, device)
    if f.prefix_offset is not None:
        if f.prefix is None:
            p.prefix = torch.full((B,), min(max(f.prefix_offset, 0), Tk), dtype=torch.int32, device=device)
        else:
            t = f.prefix.tensor
            if t.device != torch.device(device):
                raise ValueError(f"the prefix lengths are on {t.device}, the call on {device}")
            if t.dim() != 1 or t.shape[0] < B:
                raise ValueError(f"prefix lengths of shape {tuple(t.shape)} for batch {B}")
            p.prefix = (t[:B].to(torch.int64) + f.prefix_offset).clamp(0, Tk).to(torch.int32).contiguous()
    return p


def rule(p: Params, b, i, j, Tq: int, Tk: int) -> torch.Tensor:
    """Whether query i of batch entry b sees key j under p: core::visible (src/core/masks.hpp)
    without a block table, split or seqused, on broadcastable int64 tensors."""
    pos = i + (Tk - Tq)
    begin = pos - p.window_left if p.window_left >= 0 else torch.zeros_like(pos)
    end = pos + p.window_right + 1 if p.window_right >= 0 else torch.full_like(pos, Tk)
    if p.chunk:
        start = pos - torch.remainder(pos, p.chunk)
        begin, end = torch.maximum(begin, start), torch.minimum(end, start + p.chunk)
    vis = (j >= begin.clamp(0, Tk)) & (j < end.clamp(0, Tk))
    if p.prefix is not None:
        vis = vis | (j < p.prefix.to(torch.int64)[b])
    if p.doc_q is not None:
        vis = vis & (p.doc_q[b, i] == p.doc_k[b, j])
    return vis


# ---- the equivalence check -------------------------------------------------------------------------

def _points(p: Params, B: int, H: int, Tq: int, Tk: int, n_random: int, seed: int):
    """(b, h, q, kv) int64 CPU tensors: random points, and the boundary points of every part of p."""
    f = p.family
    g = torch.Generator().manual_seed(seed)
    ri = lambda hi, n: torch.randint(0, max(hi, 1), (n,), generator=g)  # noqa: E731
    bs, qs, ks = [ri(B, n_random)], [ri(Tq, n_random)], [ri(Tk, n_random)]

    def add(b, q, k):
        b, q, k = torch.broadcast_tensors(torch.as_tensor(b), torch.as_tensor(q), torch.as_tensor(k))
        bs.append(b.reshape(-1)), qs.append(q.reshape(-1)), ks.append(k.reshape(-1))

    batches = sorted(set(range(min(B, 8))) | {B - 1})   # per-batch edges: these entries (random points: all)
    rows = torch.cat([ri(Tq, 48), torch.tensor([0, 1, Tq // 2, Tq - 2, Tq - 1])])
    rb = ri(B, rows.numel())
    offsets = {-1, 0, 1}
    for x in (f.lo, f.hi):
        if x is not None:
            offsets |= {x - 1, x, x + 1}
    for d in sorted(offsets):
        add(rb, rows, rows + d)
    add(rb, rows, torch.zeros_like(rows))
    add(rb, rows, torch.full_like(rows, Tk - 1))
    if f.chunk:
        start = rows - rows % f.chunk
        for d in (-1, 0, f.chunk - 1, f.chunk):
            add(rb, rows, start + d)
    if p.prefix is not None:
        pre = p.prefix.cpu().to(torch.int64)
        for b in batches:
            for d in (-1, 0, 1):
                add(b, rows, pre[b] + d)
    if p.doc_q is not None:
        dq, dk = p.doc_q.cpu(), p.doc_k.cpu()
        for b in batches:
            for ids, T, is_q in ((dq[b], Tq, True), (dk[b], Tk, False)):
                edges = (ids[1:] != ids[:-1]).nonzero().reshape(-1) + 1
                edges = edges[torch.randperm(edges.numel(), generator=g)[:16]]
                for e in edges.tolist():
                    at = torch.tensor([e - 1, e, e + 1])
                    other = torch.cat([at, ri(Tk if is_q else Tq, 6)])
                    if is_q:     # rows at the edge, keys there and anywhere
                        add(b, at[:, None], other[None, :])
                    else:        # keys at the edge, rows there and anywhere
                        add(b, other[:, None], at[None, :])
    b, q, k = torch.cat(bs), torch.cat(qs), torch.cat(ks)
    keep = (b >= 0) & (b < B) & (q >= 0) & (q < Tq) & (k >= 0) & (k < Tk)
    b, q, k = b[keep], q[keep], k[keep]
    return b, ri(H, b.numel()), q, k


def _run_mod(fn: Callable, b, h, q, k) -> torch.Tensor:
    """fn on the points: vectorised (FlexAttention's mods are elementwise), else point by point."""
    n = b.numel()
    with torch.no_grad():
        try:
            out = torch.as_tensor(fn(b, h, q, k))
            return torch.broadcast_to(out, (n,)).to(torch.bool)
        except Exception:  # noqa: BLE001 - e.g. a mod written for 0-dim indices: one point at a time
            pass
        one = lambda x, i: x[i:i + 1]  # noqa: E731
        return torch.cat([torch.as_tensor(fn(one(b, i), one(h, i), one(q, i), one(k, i))).reshape(-1)[:1].to(torch.bool)
                          for i in range(n)])


def _device(p: Params, device):
    if device is not None:
        return torch.device(device)
    t = p.doc_q if p.doc_q is not None else p.prefix
    return t.device if t is not None else torch.device("cpu")


def verify(fn: Callable, p: Params, B: int, H: int, Tq: int, Tk: int, device=None, n_random: int = 384,
           seed: int = 0) -> Optional[str]:
    """None where the mask_mod fn and the family rule under p agree on every test point (index tensors
    on `device`, the call's: default that of p's tensors, else cpu); else the first point where they
    differ, described."""
    b, h, q, k = (x.to(_device(p, device)) for x in _points(p, B, H, Tq, Tk, n_random, seed))
    try:
        want = _run_mod(fn, b, h, q, k)
    except Exception as e:  # noqa: BLE001 - a mod that cannot be evaluated is not checked: no family
        return f"the mask_mod could not be evaluated on index tensors ({type(e).__name__}: {e})"
    got = rule(p, b, q, k, Tq, Tk)
    diff = (want.to(got.device) != got).nonzero().reshape(-1)
    if diff.numel() == 0:
        return None
    i = int(diff[0])
    return (f"the mask_mod and the family {p.family.name} differ at b={int(b[i])}, h={int(h[i])}, "
            f"q_idx={int(q[i])}, kv_idx={int(k[i])} (mask_mod {bool(want[i])})")


# ---- block tables ----------------------------------------------------------------------------------

def _listed(num: torch.Tensor, idx: torch.Tensor, nk: int) -> torch.Tensor:
    """[B', H', nq, nk] bool: the blocks a row lists (counts clamped as the kernels clamp them,
    indices outside [0, nk) skipped)."""
    m = idx.shape[-1]
    valid = torch.arange(m, device=idx.device) < num.to(torch.int64).clamp(0, min(m, nk))[..., None]
    col = torch.where(valid & (idx >= 0) & (idx < nk), idx.to(torch.int64), torch.full_like(idx, nk, dtype=torch.int64))
    out = torch.zeros(idx.shape[:-1] + (nk + 1,), dtype=torch.bool, device=idx.device)
    return out.scatter_(-1, col, True)[..., :nk]


def block_visibility(p: Params, B: int, Tq: int, Tk: int, qbs: int, kvbs: int, device=None,
                     budget: int = 1 << 24):
    """(any, all): [B, nq, nk] bool (B 1 where p reads no per-batch tensor), whether some / every
    element of each (query block, key block) is visible under p, from the rule on the whole grid (a
    few query blocks at a time, on `device`)."""
    nq, nk = -(-Tq // qbs), -(-Tk // kvbs)
    device = _device(p, device)
    if p.doc_q is None and p.prefix is None:
        B = 1
    if nq == 0 or nk == 0:
        empty = torch.zeros(B, nq, nk, dtype=torch.bool, device=device)
        return empty, empty
    j = torch.arange(nk * kvbs, device=device)
    jvalid = j < Tk
    j = j.clamp(max=Tk - 1)
    bb = torch.arange(B, device=device)[:, None, None]
    step = max(1, budget // max(1, B * qbs * nk * kvbs))
    anys, alls = [], []
    for qb0 in range(0, nq, step):
        qb1 = min(nq, qb0 + step)
        i = torch.arange(qb0 * qbs, qb1 * qbs, device=device)
        valid = (i < Tq)[:, None] & jvalid[None, :]
        vis = rule(p, bb, i.clamp(max=Tq - 1)[None, :, None], j[None, None, :], Tq, Tk).expand(B, -1, -1)
        shape = (B, qb1 - qb0, qbs, nk, kvbs)
        anys.append((vis & valid).reshape(shape).any(4).any(2))
        alls.append((vis | ~valid).reshape(shape).all(4).all(2))
    return torch.cat(anys, 1), torch.cat(alls, 1)


def tables_add_nothing(p: Params, tables, qbs: int, kvbs: int, B: int, Tq: int, Tk: int) -> bool:
    """Whether a BlockMask's tables (flashbox_block_mask order, kv_* required) say nothing the family
    does not: FlexAttention's mask under them (full blocks visible, partial ones the mask_mod, the rest
    not) is the family's own exactly when no full block holds an element the family hides, no
    unlisted block one it shows, and no block is listed both partial and full."""
    kv_num, kv_idx, fkv_num, fkv_idx = tables[:4]
    nk = -(-Tk // kvbs)
    partial = _listed(kv_num, kv_idx, nk)
    full = _listed(fkv_num, fkv_idx, nk) if fkv_num is not None else torch.zeros_like(partial)
    anyv, allv = block_visibility(p, B, Tq, Tk, qbs, kvbs, kv_num.device)
    anyv, allv = anyv[:, None], allv[:, None]
    bad = (partial & full) | (full & ~allv) | (~partial & ~full & anyv)
    return not bool(bad.any().item())


# ---- per mask_mod: the call shapes it was resolved and checked at ----------------------------------

def _version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:   # an inference tensor keeps no version counter: its identity alone
        return None


class Resolver:
    """A recognised mask_mod's Params per call shape, resolved and verified once per (B, H, Tq, Tk,
    device, the versions of the tensors it captures), and whether a BlockMask's tables add nothing,
    once per set of table tensors (their identity and versions)."""

    _MAX = 32

    def __init__(self, fn: Callable, family: Family):
        self.fn, self.family = fn, family
        self._lock = threading.Lock()
        self._params = {}

    def _captured(self) -> List[torch.Tensor]:
        f = self.family
        return [r.tensor for r in (f.doc_q, f.doc_k, f.prefix) if r is not None]

    def params(self, B: int, H: int, Tq: int, Tk: int, device) -> Tuple[Optional[Params], str]:
        """(Params, "") where the family runs this call exactly, else (None, why not)."""
        key = (B, H, Tq, Tk, str(device)) + tuple((id(t), _version(t)) for t in self._captured())
        with self._lock:
            hit = self._params.get(key)
        if hit is not None:
            return hit
        try:
            p = resolve(self.family, B, Tq, Tk, device)
            why = verify(self.fn, p, B, H, Tq, Tk, device)
            hit = (p, "") if why is None else (None, why)
        except ValueError as e:    # the family cannot say this shape (the message says why)
            hit = (None, str(e))
        except Exception as e:  # noqa: BLE001 - whatever else fails keeps the mod path, with the reason
            hit = (None, f"{type(e).__name__}: {e}")
        with self._lock:
            if len(self._params) >= self._MAX:
                self._params.clear()
            self._params[key] = hit
        return hit

    def tables_add_nothing(self, p: Params, tables, qbs: int, kvbs: int, B: int, Tq: int, Tk: int) -> bool:
        present = [t for t in tables if t is not None]
        key = (qbs, kvbs) + tuple((id(t), _version(t)) for t in present)
        with self._lock:
            hit = p.tables_checked.get(key)
        if hit is not None and all(r() is t for r, t in zip(hit[0], present)):
            return hit[1]
        ok = tables_add_nothing(p, tables, qbs, kvbs, B, Tq, Tk)
        with self._lock:
            if len(p.tables_checked) >= self._MAX:
                p.tables_checked.clear()
            p.tables_checked[key] = ([weakref.ref(t) for t in present], ok)
        return ok
