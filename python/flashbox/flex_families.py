"""FlexAttention mask_mods recognised as flashbox's built-in mask families.

flashbox.flex_attention runs a BlockMask's mask_mod as an NVRTC mask mod (flashbox.flex_translate),
which runs on the generic mod path (the sm80 kernels and their bit tiles). The common mask_mods are
flashbox's built-in mask families (flashbox_attention_ext's window, attention_chunk, document ids and
prefix lengths), which the kernels walk and mask as data, far faster. This module recognises them in
the traced aten graph (flex_translate.trace: make_fx's graph, the translator's IR) and maps them to
the ext's fields; anything else keeps the mod path, unchanged.

Recognised (b, h, q_idx, kv_idx the mask_mod's arguments; x = kv_idx - q_idx; W, R, C, N Python ints
or one-element captured tensors; every comparison in either orientation and with its operands on
either side, `&` / `|` (bitwise or logical, in any order and nesting), linear integer arithmetic on
the indices, casts to int32/int64, torch's and_masks / or_masks):

  bounds     x <= R, x < R, x >= -W, x > -W, x == R, abs(x) <= W, abs(x) < W (the window's two sides:
             a lower bound kv_idx >= q_idx - W and an upper bound kv_idx <= q_idx + R); causal is
             kv_idx <= q_idx (R = 0); several bounds intersect
  chunk      q_idx // C == kv_idx // C (C > 0; `//`, floor or trunc division)
  documents  doc_q[b, q_idx] == doc_k[b, kv_idx] (doc_q and doc_k captured integer tensors, the same
             one or two; [B, T], [T, B] or [T] indexed by q_idx / kv_idx and b)
  prefix     kv_idx < prefix[b] (+ a constant; `<=` is `< prefix + 1`), prefix a captured integer [B]
             tensor, or kv_idx < N

combined as  documents & (prefix | (bounds & chunk))   (each part optional; a prefix only in an `|`
whose other side is bounds and/or a chunk, and then no bounds or chunk outside the `|`). Other
shapes (a negated document test, a bound on q_idx or kv_idx alone, a strict causal x < 0 that needs
window_right = -1, bounds read from a tensor, a prefix outside documents' `&`, ...) are not
recognised.

The family rule is flashbox's core::visible (src/core/masks.hpp) in bottom-right positions, the
mask_mod's in absolute ones: with shift = Tk - Tq the bounds become window_left = W + shift and
window_right = R - shift (each >= 0, else the mod path), a chunk needs shift = 0; causal
(window_right 0) goes as the plain causal flag. Documents are passed as int32 [B, T] (ids that do
not fit int32 keep the mod path), the prefix as int32 [B] clamped to [0, Tk].

Exactness: the structural match is only half of it (flex_family_check.py has the rest). Per call shape (B, Hq, Tq, Tk, and the captured
tensors' versions) the mask_mod itself and the family rule (rule(), the Python core::visible) are
evaluated on a few hundred random (b, h, q, kv) points and on the boundary points of every part
(each bound's diagonal and its neighbours, chunk and document edges, the prefix's end, the first and
last rows and keys); any difference keeps the mod path. A BlockMask's tables are dropped (the
family's own range walk is exact and faster) only where they add nothing: no full block with an
element the family hides and no skipped block with an element it shows (tables_add_nothing(),
checked on the whole grid once per set of tables); otherwise they are passed with the family, which
is FlexAttention's own semantics (full blocks visible, partial blocks the mask_mod, the rest not).
A captured tensor without a version counter (an inference tensor) is cached by its identity alone:
update one in place and the family keeps the ids it copied.

Needs torch >= 1.13 (make_fx), as the translator.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch

from . import _ext
from . import flex_translate as ft

__all__ = ["Family", "Params", "Resolver", "recognise", "recognise_graph", "resolve", "rule", "verify",
           "block_visibility", "tables_add_nothing", "enabled", "disabled"]

_INT = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)

# ---- on / off ------------------------------------------------------------------------------------

_off = [0]
_off_lock = threading.Lock()


def enabled() -> bool:
    """Whether recognised mask_mods run as families: `with disabled():` turns it off (every mask_mod then
    runs as a mod: the tests and the benchmark compare the two routes this way)."""
    return _off[0] == 0


@contextlib.contextmanager
def disabled():
    """Runs recognised mask_mods as mods inside the block (process-wide, so that a backward that
    autograd runs on another thread takes the forward's path), e.g. to compare the two."""
    with _off_lock:
        _off[0] += 1
    try:
        yield
    finally:
        with _off_lock:
            _off[0] -= 1


# ---- abstract values of the traced graph ----------------------------------------------------------

class _NoMatch(Exception):
    """The graph is not one of the families (the message says where)."""


class _Read:
    """One element of a captured tensor, tensor[idx]: idx names each dimension's index, "b", "q"
    (q_idx) or "kv" (kv_idx)."""

    def __init__(self, tensor: torch.Tensor, idx: Tuple[str, ...]):
        self.tensor, self.idx = tensor, idx

    def same(self, o) -> bool:
        return o is not None and self.tensor is o.tensor and self.idx == o.idx


class _Lin:
    """An integer q * q_idx + kv * kv_idx + c + r * read."""

    def __init__(self, q=0, kv=0, c=0, read: Optional[_Read] = None, r=0):
        self.q, self.kv, self.c, self.read, self.r = q, kv, c, (read if r else None), r

    def plus(self, o: "_Lin", sign: int = 1) -> "_Lin":
        if self.read is not None and o.read is not None and not self.read.same(o.read):
            raise _NoMatch("two different tensor reads in one sum")
        r = self.r + sign * o.r
        return _Lin(self.q + sign * o.q, self.kv + sign * o.kv, self.c + sign * o.c, self.read or o.read, r)

    def times(self, k: int) -> "_Lin":
        return _Lin(self.q * k, self.kv * k, self.c * k, self.read, self.r * k)

    def is_(self, q=0, kv=0) -> bool:
        return (self.q, self.kv, self.c, self.r) == (q, kv, 0, 0)

    def pure_read(self) -> Optional[_Read]:
        return self.read if (self.q, self.kv, self.c, self.r) == (0, 0, 0, 1) else None


class _Sym:
    def __init__(self, name: str):
        self.name = name


class _Abs:
    def __init__(self, lin: _Lin):
        self.lin = lin


class _FloorDiv:
    def __init__(self, lin: _Lin, d: int):
        self.lin, self.d = lin, d


# Boolean values: tuples ("bound", lo, hi) (lo <= kv - q <= hi, None unbounded), ("prefix", read or
# None, offset) (kv < read + offset), ("doc", read_q, read_kv), ("chunk", C), ("and", [..]),
# ("or", [..]), ("const", bool).

_FLIP = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "eq": "eq", "ne": "ne"}
_NOT = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}


def _floordiv(a: int, b: int) -> int:
    return a // b


def _ceildiv(a: int, b: int) -> int:
    return -((-a) // b)


# Coefficients and constants past these could overflow the mod's integer arithmetic (int64 here, the
# kernels' int32 in FlexAttention), where the exact arithmetic below would not: not taken.
_MAX_COEF, _MAX_CONST = 16, 2 ** 30


def _cmp_lin(op: str, d: _Lin):
    """`d op 0` for an integer linear form, as a family atom (or _NoMatch)."""
    if max(abs(d.q), abs(d.kv), abs(d.r)) > _MAX_COEF or abs(d.c) > _MAX_CONST:
        raise _NoMatch("coefficients or constants large enough to overflow")
    if d.r:
        if d.read.tensor.dtype not in (torch.int32, torch.int64):
            raise _NoMatch(f"arithmetic on a {d.read.tensor.dtype} tensor read (it wraps at its width)")
        # kv_idx against a tensor read: kv + c - read op 0 (after the sign that makes kv's +1).
        if d.kv == -1:
            d, op = d.times(-1), _FLIP[op]
        if d.q != 0 or d.kv != 1 or d.r != -1:
            raise _NoMatch("a comparison with a tensor read that is not kv_idx against it")
        if d.read.idx != ("b",):
            raise _NoMatch("a prefix tensor not indexed by b alone")
        if op == "le":
            return ("prefix", d.read, 1 - d.c)
        if op == "lt":
            return ("prefix", d.read, -d.c)
        raise _NoMatch(f"kv_idx {op} a tensor read is not a prefix")
    if d.q == 0 and d.kv != 0:
        if d.kv == -1:
            d, op = d.times(-1), _FLIP[op]
        if d.kv != 1:
            raise _NoMatch("a multiple of kv_idx alone")
        if op == "le":
            return ("prefix", None, 1 - d.c)
        if op == "lt":
            return ("prefix", None, -d.c)
        raise _NoMatch(f"kv_idx {op} a constant is not a prefix")
    if d.q != 0 and d.q == -d.kv:
        b = d.kv                         # d = b * (kv - q) + c
        if b < 0:
            d, op, b = d.times(-1), _FLIP[op], -b
        c = d.c
        if op == "le":
            return ("bound", None, _floordiv(-c, b))
        if op == "lt":
            return ("bound", None, _floordiv(-c - 1, b))
        if op == "ge":
            return ("bound", _ceildiv(-c, b), None)
        if op == "gt":
            return ("bound", _ceildiv(1 - c, b), None)
        if op == "eq" and (-c) % b == 0:
            return ("bound", -c // b, -c // b)
        raise _NoMatch(f"kv_idx - q_idx {op} a constant is not a window bound")
    raise _NoMatch("a comparison that is not of kv_idx - q_idx, or of kv_idx alone")


def _cmp(op: str, a, b):
    if isinstance(b, _Abs) and not isinstance(a, _Abs):
        a, b, op = b, a, _FLIP[op]
    if isinstance(a, _Abs):
        if not isinstance(b, _Lin) or (b.q, b.kv, b.r) != (0, 0, 0) or op not in ("le", "lt"):
            raise _NoMatch("abs(..) compared otherwise than <= or < a constant")
        w = _Lin(c=b.c)
        return ("and", [_cmp_lin(op, a.lin.plus(w, -1)), _cmp_lin(op, a.lin.times(-1).plus(w, -1))])
    if isinstance(a, _FloorDiv) or isinstance(b, _FloorDiv):
        if not (isinstance(a, _FloorDiv) and isinstance(b, _FloorDiv)) or op != "eq" or a.d != b.d:
            raise _NoMatch("a division compared otherwise than q_idx // C == kv_idx // C")
        if not ((a.lin.is_(q=1) and b.lin.is_(kv=1)) or (a.lin.is_(kv=1) and b.lin.is_(q=1))):
            raise _NoMatch("a chunk test of other values than q_idx and kv_idx")
        return ("chunk", a.d)
    if not isinstance(a, _Lin) or not isinstance(b, _Lin):
        raise _NoMatch("a comparison of values that are not integers")
    ra, rb = a.pure_read(), b.pure_read()
    if op == "eq" and ra is not None and rb is not None and not ra.same(rb):
        sides = [_doc_side(ra), _doc_side(rb)]
        if sorted(sides) != ["kv", "q"]:
            raise _NoMatch("a document test that does not read one tensor at q_idx and one at kv_idx")
        return ("doc", ra, rb) if sides[0] == "q" else ("doc", rb, ra)
    return _cmp_lin(op, a.plus(b, -1))


def _doc_side(r: _Read) -> str:
    """"q" or "kv": the position a document read is indexed by ([T] by it, [B, T] / [T, B] by b too)."""
    idx = r.idx
    if len(idx) == 1 and idx[0] in ("q", "kv"):
        return idx[0]
    if len(idx) == 2 and "b" in idx and (set(idx) - {"b"}) <= {"q", "kv"} and idx[0] != idx[1]:
        return idx[0] if idx[1] == "b" else idx[1]
    raise _NoMatch(f"a document tensor indexed by {idx}")


def _negate(x):
    if x[0] == "bound" and (x[1] is None) != (x[2] is None):
        return ("bound", x[2] + 1, None) if x[1] is None else ("bound", None, x[1] - 1)
    if x[0] == "const":
        return ("const", not x[1])
    raise _NoMatch(f"a negation of {x[0]}")


def _flat(x, kind: str) -> list:
    if x[0] == kind:
        return [y for item in x[1] for y in _flat(item, kind)]
    return [x]


# ---- the graph walk ---------------------------------------------------------------------------------

_IDENTITY = {"alias", "detach", "clone", "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand",
             "contiguous", "expand_as", "view_as", "broadcast_to", "flatten", "permute", "t", "transpose",
             "positive", "lift_fresh_copy", "lift_fresh"}
_CASTS = {"_to_copy", "to", "type_as", "_to_dtype"}
_CMP = {"eq", "ne", "lt", "le", "gt", "ge"}


def _opname(n) -> str:
    packet = getattr(n.target, "overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(n.target, "__name__", str(n.target))


def _walk(gm, values) -> tuple:
    """The boolean family expression of the graph's output."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    val = {}
    for n, a in zip(placeholders, ("b", "h", "q", "kv")):
        val[n] = _Sym(a) if a in ("b", "h") else _Lin(q=int(a == "q"), kv=int(a == "kv"))
    const = {}

    def scalar(x):
        """A constant operand (Python scalar or one-element tensor) as an int, bool or None."""
        if isinstance(x, torch.fx.Node):
            if x not in const:
                return None
            t = const[x]
            if t.numel() != 1 or t.dtype not in _INT:
                raise _NoMatch(f"a captured tensor of shape {tuple(t.shape)} / {t.dtype} used as a value")
            v = t.reshape(-1)[0].item()
            return bool(v) if t.dtype == torch.bool else int(v)
        if isinstance(x, bool):
            return x
        if isinstance(x, int):
            return x
        raise _NoMatch(f"the constant {x!r}")

    def num(x) -> object:
        s = scalar(x)
        if s is not None:
            if isinstance(s, bool):
                raise _NoMatch("a boolean used as a number")
            return _Lin(c=s)
        v = val.get(x)
        if v is None:
            raise _NoMatch(f"no value for {x}")
        return v

    def lin(x) -> _Lin:
        v = num(x)
        if not isinstance(v, _Lin):
            raise _NoMatch("arithmetic on a value that is not an integer index")
        return v

    def boolean(x):
        s = scalar(x)
        if s is not None:
            if not isinstance(s, bool):
                raise _NoMatch("an integer used as a boolean")
            return ("const", s)
        v = val.get(x)
        if not isinstance(v, tuple):
            raise _NoMatch("a value used as a boolean that is not a comparison")
        return v

    def dtype(n):
        v = values.get(n)
        return v.dtype if isinstance(v, torch.Tensor) else None

    out = None
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "get_attr":
            const[n] = getattr(gm, n.target)
            continue
        if n.op == "output":
            out = n.args[0]
            if isinstance(out, (tuple, list)):
                if len(out) != 1:
                    raise _NoMatch("more than one output")
                out = out[0]
            break
        if n.op != "call_function":
            raise _NoMatch(f"a {n.op} node")
        op = _opname(n)
        ins = []
        torch.fx.node.map_arg((n.args, n.kwargs), lambda a: ins.append(a))
        if all(a in const for a in ins):      # captured tensors alone: evaluated at trace time
            if not isinstance(values.get(n), torch.Tensor):
                raise _NoMatch(f"{op} of captured values is not a tensor")
            const[n] = values[n]
            continue
        args, kw = n.args, n.kwargs
        dt = dtype(n)
        if op in _CMP:
            val[n] = _cmp(op, num(args[0]), num(args[1]))
        elif op in ("bitwise_and", "logical_and", "bitwise_or", "logical_or") or (
                op in ("mul", "add") and dt == torch.bool):
            if dt != torch.bool:
                raise _NoMatch(f"{op} of integers")
            kind = "and" if op in ("bitwise_and", "logical_and", "mul") else "or"
            val[n] = (kind, [boolean(args[0]), boolean(args[1])])
        elif op in ("bitwise_not", "logical_not"):
            if op == "bitwise_not" and dt != torch.bool:
                raise _NoMatch("~ of an integer")
            val[n] = _negate(boolean(args[0]))
        elif op in ("add", "sub", "rsub"):
            alpha = kw.get("alpha", args[2] if len(args) > 2 else 1)
            if not isinstance(alpha, int) or isinstance(alpha, bool):
                raise _NoMatch(f"{op} with alpha {alpha!r}")
            a, b = lin(args[0]), lin(args[1]).times(alpha)
            val[n] = a.plus(b) if op == "add" else (a.plus(b, -1) if op == "sub" else b.plus(a, -1))
        elif op == "mul":
            sa, sb = scalar(args[0]), scalar(args[1])
            if sa is None and sb is None:
                raise _NoMatch("a product of two indices")
            factor = sa if sa is not None else sb
            if isinstance(factor, bool) or abs(factor) > _MAX_COEF:
                raise _NoMatch(f"a product with {factor!r}")
            val[n] = lin(args[1] if sa is not None else args[0]).times(factor)
        elif op == "neg":
            val[n] = lin(args[0]).times(-1)
        elif op == "abs":
            val[n] = _Abs(lin(args[0]))
        elif op in ("floor_divide", "div"):
            mode = "floor" if op == "floor_divide" else kw.get("rounding_mode", args[2] if len(args) > 2 else None)
            d = scalar(args[1])
            a = lin(args[0])
            # floor and trunc agree on q_idx, kv_idx >= 0 and a positive divisor (the only form taken)
            if mode not in ("floor", "trunc") or not isinstance(d, int) or isinstance(d, bool) or d <= 0 or not (
                    a.is_(q=1) or a.is_(kv=1)):
                raise _NoMatch(f"a division ({op}, {mode}) other than q_idx or kv_idx // a positive constant")
            val[n] = _FloorDiv(a, d)
        elif op in _IDENTITY:
            if args[0] in const:
                raise _NoMatch(f"{op} of a captured tensor")
            val[n] = val[args[0]]
        elif op in _CASTS:
            src = args[0]
            v = val.get(src)
            if isinstance(v, tuple):
                if dt != torch.bool:
                    raise _NoMatch("a boolean cast to a number")
            elif dt not in (torch.int32, torch.int64):
                raise _NoMatch(f"an index cast to {dt}")
            val[n] = v if v is not None else num(src)
        elif op in ("new_ones", "ones_like", "new_zeros", "zeros_like"):
            if dt != torch.bool:
                raise _NoMatch(f"{op} of {dt}")
            val[n] = ("const", op in ("new_ones", "ones_like"))
        elif op == "index":
            base, indices = args[0], args[1]
            if base not in const:
                raise _NoMatch("indexing a computed value")
            t = const[base]
            if t.dtype not in _INT or len(indices) != t.dim() or any(i is None for i in indices):
                raise _NoMatch(f"a read of a {t.dtype} tensor of shape {tuple(t.shape)} with {len(indices)} indices")
            idx = []
            for i in indices:
                v = val.get(i)
                if isinstance(v, _Sym) and v.name == "b":
                    idx.append("b")
                elif isinstance(v, _Lin) and v.is_(q=1):
                    idx.append("q")
                elif isinstance(v, _Lin) and v.is_(kv=1):
                    idx.append("kv")
                else:
                    raise _NoMatch("a tensor indexed by other than b, q_idx or kv_idx")
            val[n] = _Lin(read=_Read(t, tuple(idx)), r=1)
        else:
            raise _NoMatch(f"the operation {op}")
    if out is None or dtype(out) not in (torch.bool, None):
        raise _NoMatch("the output is not a boolean")
    return boolean(out)


# ---- families ------------------------------------------------------------------------------------

@dataclass(eq=False)
class Family:
    """A recognised mask_mod, in the mask_mod's absolute positions: lo <= kv_idx - q_idx <= hi (None:
    unbounded), q_idx // chunk == kv_idx // chunk (chunk > 0), doc_q[.., q_idx] == doc_k[.., kv_idx],
    and kv_idx < prefix[b] + prefix_offset (prefix None: kv_idx < prefix_offset; prefix_offset None:
    no prefix), combined as documents & (prefix | (bounds & chunk))."""
    lo: Optional[int] = None
    hi: Optional[int] = None
    chunk: int = 0
    doc_q: Optional[_Read] = None
    doc_k: Optional[_Read] = None
    prefix: Optional[_Read] = None
    prefix_offset: Optional[int] = None

    @property
    def name(self) -> str:
        parts = []
        if self.doc_q is not None:
            parts.append("document")
        if self.prefix_offset is not None:
            parts.append("prefix-lm")
        if self.lo is not None:
            parts.append("window")
        elif self.hi == 0:
            parts.append("causal")
        elif self.hi is not None:
            parts.append("window")
        if self.chunk:
            parts.append("chunk")
        return "+".join(parts)


def _ranges(items) -> Tuple[list, int]:
    """Window bounds and a chunk (their conjunction): (bounds, chunk or 0)."""
    bounds, chunk = [], 0
    for x in items:
        if x[0] == "bound":
            bounds.append(x)
        elif x[0] == "chunk":
            if chunk:
                raise _NoMatch("two chunk tests")
            chunk = x[1]
        elif not (x[0] == "const" and x[1]):
            raise _NoMatch(f"{x[0]} where window bounds or a chunk are taken")
    return bounds, chunk


def _family(expr) -> Family:
    f = Family()
    top, disjunctions = [], []
    for x in _flat(expr, "and"):
        if x[0] == "doc":
            if f.doc_q is not None:
                raise _NoMatch("two document tests")
            f.doc_q, f.doc_k = x[1], x[2]
        elif x[0] == "or":
            disjunctions.append(x)
        else:
            top.append(x)
    bounds, f.chunk = _ranges(top)
    if disjunctions:
        # documents & (prefix | (bounds & chunk)): nothing else may restrict the prefix's keys.
        if len(disjunctions) > 1 or bounds or f.chunk:
            raise _NoMatch("window bounds or a chunk outside a prefix's disjunction, or two disjunctions")
        parts = [y for y in _flat(disjunctions[0], "or") if not (y[0] == "const" and not y[1])]
        prefixes = [y for y in parts if y[0] == "prefix"]
        rest = [y for y in parts if y[0] != "prefix"]
        if len(prefixes) != 1 or len(rest) != 1:
            raise _NoMatch("a disjunction that is not prefix | (window bounds and/or a chunk)")
        f.prefix, f.prefix_offset = prefixes[0][1], prefixes[0][2]
        bounds, f.chunk = _ranges(_flat(rest[0], "and"))
        if not bounds and not f.chunk:
            raise _NoMatch("a prefix | something that is no bound")
    for _, lo, hi in bounds:
        if lo is not None:
            f.lo = lo if f.lo is None else max(f.lo, lo)
        if hi is not None:
            f.hi = hi if f.hi is None else min(f.hi, hi)
    if f.lo is not None and f.hi is not None and f.lo > f.hi:
        raise _NoMatch("window bounds that admit nothing")
    if f.doc_q is None and f.prefix_offset is None and f.lo is None and f.hi is None and not f.chunk:
        raise _NoMatch("no family (every key visible)")
    return f


def recognise_graph(gm, sample_args) -> Family:
    """The family of a traced mask_mod graph (flex_translate.trace); raises ValueError naming what
    is not a family."""
    try:
        return _family(_walk(gm, ft.node_values(gm, sample_args)))
    except _NoMatch as e:
        raise ValueError(f"not a built-in mask family: {e}") from None


def recognise(fn: Callable, device=None) -> Optional[Family]:
    """The family of a FlexAttention mask_mod, or None (not one, or not traceable)."""
    if ft.is_noop_mask(fn):
        return None
    try:
        gm, args = ft.trace(fn, _ext.MOD_MASK, device)
        return recognise_graph(gm, args)
    except Exception:  # noqa: BLE001 - whatever fails here (untraceable, not a family) keeps the mod path
        return None


# The mapping to flashbox's fields and its checks live beside (flex_family_check.py); their names are
# this module's too.
from .flex_family_check import (  # noqa: E402,F401
    Params, Resolver, block_visibility, resolve, rule, tables_add_nothing, verify)
